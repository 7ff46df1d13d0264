"""`frugal-proxy -- <cmd>` is transparent: the SDK client sees the same server through it, in
both protocol eras, against an SDK server (both eras) and server-everything (session era only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import (
    CreateMessageResult,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

from tests.conftest import ROOT, notes_command, params, proxy_command
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

ROOTS = [Root(uri="file:///tmp/frugal-root", name="frugal")]


async def sampling(context: Any, request: Any) -> CreateMessageResult:
    prompt = request.messages[0].content.text
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=f"sampled: {prompt}"), model="test-model"
    )


async def elicitation(context: Any, request: Any) -> ElicitResult:
    if "confirm" in str(getattr(request, "requested_schema", "")):
        return ElicitResult(action="accept", content={"confirm": True})
    return ElicitResult(action="decline")


async def roots(context: Any) -> ListRootsResult:
    return ListRootsResult(roots=ROOTS)


def client(command: list[str], mode: str, **kwargs: Any) -> Client:
    return Client(
        params(command),
        mode=mode,  # type: ignore[arg-type]
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
        cache=None,
        **kwargs,
    )


def dump(model: Any) -> Any:
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(data, dict):
        data.pop("_meta", None)
    return data


CALLS = {
    "notes": [("add", {"a": 2, "b": 40}), ("echo", {"text": "héllo, wörld"}), ("list_notes", {})],
    "everything": [
        ("echo", {"message": "héllo"}),
        ("get-sum", {"a": 2, "b": 40}),
        ("get-structured-content", {"location": "New York"}),
    ],
}


async def test_tools_list_and_calls_match_direct(upstream: tuple[str, list[str]], mode: str) -> None:
    name, command = upstream
    with deadline(40):
        async with client(command, mode) as direct, client(proxy_command(command), mode) as proxied:
            # A modern client gets 2026-07-28 from the proxy even where the upstream is session-era.
            expected = "2026-07-28" if mode == "auto" else direct.protocol_version
            assert proxied.protocol_version == expected
            direct_tools = [dump(t) for t in (await direct.list_tools()).tools]
            proxied_tools = [dump(t) for t in (await proxied.list_tools()).tools if not t.name.startswith("frugal__")]
            assert proxied_tools == direct_tools
            for tool, arguments in CALLS[name]:
                got = await proxied.call_tool(tool, arguments)
                want = await direct.call_tool(tool, arguments)
                assert dump(got) == dump(want), tool


async def check_progress_in_order(client: Any, name: str) -> None:
    """A four-step call of the named server's long-running tool reports 1..4 of 4, in order."""
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    tool, arguments = (
        ("count", {"steps": 4}) if name == "notes" else ("trigger-long-running-operation", {"duration": 1, "steps": 4})
    )
    result = await client.call_tool(tool, arguments, progress_callback=on_progress)
    assert not result.is_error
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]


async def test_progress_arrives_in_order(upstream: tuple[str, list[str]], mode: str) -> None:
    name, command = upstream
    with deadline(40):
        async with client(proxy_command(command), mode) as proxied:
            await check_progress_in_order(proxied, name)


SERVER_REQUESTS = {
    "notes": {
        "sampling": ("summarise", {"topic": "tides"}, "sampled: Summarise tides"),
        "elicitation": ("confirm", {"action": "deploy"}, "deploy: confirmed"),
        "roots": ("roots", {}, "file:///tmp/frugal-root"),
    },
    "everything": {
        "sampling": ("trigger-sampling-request", {"prompt": "tides", "maxTokens": 20}, "sampled: Resource"),
        "elicitation": ("trigger-elicitation-request", {}, "decline"),
        "roots": ("get-roots-list", {}, "file:///tmp/frugal-root"),
    },
}


@pytest.mark.parametrize("kind", ["sampling", "elicitation", "roots"])
async def test_server_requests_round_trip(upstream: tuple[str, list[str]], mode: str, kind: str) -> None:
    name, command = upstream
    tool, arguments, expected = SERVER_REQUESTS[name][kind]
    with deadline(40):
        async with client(proxy_command(command), mode) as proxied:
            result = await proxied.call_tool(tool, arguments)
    text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
    assert not result.is_error, text
    assert expected in text


async def test_cancelled_call_is_cancelled_upstream(mode: str) -> None:
    from tests.conftest import notes_command

    with deadline(40):
        async with client(proxy_command(notes_command()), mode) as proxied:
            with anyio.move_on_after(paced(0.5)):  # long enough for the call to reach the upstream
                await proxied.call_tool("sleep", {"seconds": 30})
            with deadline(5):  # the upstream counts the cancellation it was sent
                while (await proxied.call_tool("cancellations", {})).structured_content != {"result": 1}:  # noqa: ASYNC110 - another process's count
                    await anyio.sleep(0.05)


async def test_resources_and_prompts_pass_through(upstream: tuple[str, list[str]], mode: str) -> None:
    name, command = upstream
    with deadline(40):
        async with client(command, mode) as direct, client(proxy_command(command), mode) as proxied:
            for method in ("list_resources", "list_resource_templates", "list_prompts"):
                want = dump(await getattr(direct, method)())
                got = dump(await getattr(proxied, method)())
                for body in (want, got):
                    for key in ("ttlMs", "cacheScope", "resultType"):
                        body.pop(key, None)
                assert got == want, method
            uri = "notes://welcome" if name == "notes" else str((await direct.list_resources()).resources[0].uri)
            assert (
                dump(await proxied.read_resource(uri))["contents"] == dump(await direct.read_resource(uri))["contents"]
            )
            prompt, arguments = ("review", {"topic": "caching"}) if name == "notes" else ("simple-prompt", None)
            assert dump(await proxied.get_prompt(prompt, arguments)) == dump(await direct.get_prompt(prompt, arguments))


FILESYSTEM_JS = (
    ROOT / ".deps" / "node" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)


async def test_a_modern_clients_roots_bound_a_session_era_server(tmp_path: Path) -> None:
    """server-filesystem asks roots/list right after initialize, outside any call: through the
    proxy a 2026-07-28 client's roots must narrow it as they do directly (security)."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "secret.txt").write_text("above the root\n")
    (data / "sub" / "inside.txt").write_text("inside the root\n")
    granted = ListRootsResult(roots=[Root(uri=(data / "sub").as_uri(), name="sub")])

    async def sub_roots(context: Any) -> ListRootsResult:
        return granted

    command = ["node", str(FILESYSTEM_JS), str(data)]

    def fs_client(argv: list[str]) -> Client:
        return Client(params(argv), mode="auto", list_roots_callback=sub_roots, cache=None)

    outcomes: dict[str, tuple[bool, bool]] = {}
    with deadline(60):
        for via, argv in (("direct", command), ("proxy", proxy_command(command))):
            async with fs_client(argv) as client:
                assert client.protocol_version == ("2026-07-28" if via == "proxy" else "2025-11-25")
                while via == "direct":  # directly the server applies the roots a moment after initialize
                    allowed = await client.call_tool("list_allowed_directories", {})
                    if "sub" in str(allowed.content):
                        break
                    await anyio.sleep(0.05)
                # Through the proxy the first call is the read: the roots must be in place before it.
                above = await client.call_tool("read_text_file", {"path": str(data / "secret.txt")})
                inside = await client.call_tool("read_text_file", {"path": str(data / "sub" / "inside.txt")})
            outcomes[via] = (bool(above.is_error), bool(inside.is_error))
            assert "above the root" not in str(above.content), via
    assert outcomes == {"direct": (True, False), "proxy": (True, False)}


async def test_a_modern_upstream_that_answers_discover_late_is_still_served(mode: str) -> None:
    from tests.conftest import notes_command

    # A 10 ms probe timeout: the SDK server is still importing when it expires, so the proxy
    # moves on to initialize, which a dual-era server refuses once it has answered discover.
    with deadline(40):
        async with client(proxy_command(notes_command(), "--probe-timeout", "0.01"), mode) as proxied:
            assert (await proxied.call_tool("add", {"a": 20, "b": 22})).structured_content == {"result": 42}
            result = await proxied.call_tool("summarise", {"topic": "tides"})
            assert "sampled: Summarise tides" in str(result.content)


async def test_the_upstream_command_may_come_without_a_double_dash() -> None:
    """The MCP Inspector consumes the first `--`: `frugal-proxy node server.js` works too."""
    upstream = notes_command()
    with deadline(30):
        async with Client(
            params([sys.executable, "-m", "frugal_proxy", "--name", "notes", *upstream]), mode="legacy"
        ) as client:
            assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}


def test_the_wrap_form_serves_with_its_start_up_heap_frozen(tmp_path: Path) -> None:
    """What start-up made is left out of the garbage collector's later passes (each full one
    would walk it all) before the first request is read; calls are served as ever."""
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}},
    ]
    log = tmp_path / "stderr.txt"
    with log.open("w") as errors:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "frugal_proxy", "--log-level", "debug", "--", *notes_command()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        assert proxy.stdin is not None and proxy.stdout is not None
        try:
            proxy.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
            proxy.stdin.flush()
            replies: dict[Any, Any] = {}
            while 2 not in replies:  # bounded by the test's timeout
                reply = json.loads(proxy.stdout.readline())
                replies[reply.get("id")] = reply
            proxy.stdin.close()
            assert proxy.wait(timeout=paced(20)) == 0
        finally:
            proxy.kill()
            proxy.wait()
            proxy.stdout.close()
            if not proxy.stdin.closed:
                proxy.stdin.close()
    assert replies[2]["result"]["structuredContent"] == {"result": 5}
    frozen = [line for line in log.read_text().splitlines() if "start-up heap frozen for the garbage collector" in line]
    assert len(frozen) == 1, log.read_text()[-2000:]


def test_requests_piped_in_with_stdin_closed_at_once_are_all_answered(upstream: tuple[str, list[str]]) -> None:
    """`printf '…' | frugal-proxy -- server`: the client's input ends before the upstream has
    even been addressed; what it asked is answered before the proxy exits (the answers used to
    be "upstream … is down: not started": the shutdown did not wait for requests handed to a
    task that had not run yet). A batch is waited for too."""
    name, command = upstream
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    call = (
        {"name": "add", "arguments": {"a": 2, "b": 3}}
        if name == "notes"
        else {"name": "echo", "arguments": {"message": "hi"}}
    )
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
        [{"jsonrpc": "2.0", "id": 3, "method": "ping"}, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"}],
    ]
    done = subprocess.run(
        [sys.executable, "-m", "frugal_proxy", "--", *command],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=paced(50),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    replies: dict[Any, Any] = {}
    for line in done.stdout.splitlines():
        decoded = json.loads(line)
        for reply in decoded if isinstance(decoded, list) else [decoded]:
            if "id" in reply:  # server-everything also sends notifications
                replies[reply["id"]] = reply
    assert sorted(replies) == [1, 2, 3, 4], done.stdout[-2000:]
    assert all("error" not in reply for reply in replies.values()), replies
    assert replies[2]["result"].get("isError") is not True, replies[2]
    assert replies[4]["result"]["tools"]


def test_a_word_that_is_no_subcommand_nor_program_is_refused_clearly() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "frugal_proxy", "statz", "--month", "2026-07"],
        capture_output=True,
        text=True,
        timeout=paced(30),
        check=False,
    )
    assert done.returncode == 2
    assert "'statz' is neither a subcommand" in done.stderr and "put the upstream command after --" in done.stderr


async def test_the_wrap_form_reads_the_governor_of_a_config_file(tmp_path: Path) -> None:
    """`--config` (or FRUGAL_CONFIG) gives a wrapped server the file's budgets; its [upstreams]
    are the wrapped command's to replace, and a flag wins over the file."""
    config = tmp_path / "frugal.toml"
    config.write_text('[upstreams.ignored]\ncommand = ["/nonexistent"]\n[governor]\nmax_bytes = 2048\n')
    upstream = notes_command()
    with deadline(60):
        async with Client(params(proxy_command(upstream, "--config", str(config))), mode="legacy") as client:
            shaped = await client.call_tool("blob", {"size": 10_000})
        flagged = params(proxy_command(upstream, "--config", str(config), "--max-bytes", "65536"))
        async with Client(flagged, mode="legacy") as client:
            whole = await client.call_tool("blob", {"size": 10_000})
    assert "frugal/governor" in (shaped.meta or {})
    assert "frugal/governor" not in (whole.meta or {})


async def test_the_wrap_form_reads_frugal_config_and_the_default_path(tmp_path: Path) -> None:
    """Without `--config`, the wrap form reads the file `serve` reads: `$FRUGAL_CONFIG`, else
    `$FRUGAL_HOME/config/frugal.toml`."""
    text = '[upstreams.ignored]\ncommand = ["/nonexistent"]\n[governor]\nmax_bytes = 2048\n'
    named = tmp_path / "named.toml"
    named.write_text(text)
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "frugal.toml").write_text(text)
    upstream = notes_command()
    shaped = []
    with deadline(60):
        for env in (
            {"FRUGAL_CONFIG": str(named), "FRUGAL_HOME": str(tmp_path / "empty")},
            {"FRUGAL_CONFIG": "", "FRUGAL_HOME": str(home)},  # empty: unset
        ):
            async with Client(params(proxy_command(upstream), env), mode="legacy") as client:
                shaped.append(await client.call_tool("blob", {"size": 10_000}))
    assert all("frugal/governor" in (result.meta or {}) for result in shaped)


def test_a_bad_config_file_stops_the_wrap_form_with_its_message(tmp_path: Path) -> None:
    upstream = notes_command()
    broken = tmp_path / "broken.toml"
    broken.write_text("[governor]\nmax_bytes = 10\n")
    done = subprocess.run(
        proxy_command(upstream, "--config", str(broken)), capture_output=True, text=True, timeout=paced(30), check=False
    )
    assert done.returncode == 2 and "at governor: max_bytes must be at least 1024" in done.stderr


async def test_calls_written_together_are_each_answered_and_a_cancel_among_them_reaches_its_call(
    upstream: tuple[str, list[str]],
) -> None:
    """Requests that arrive in one read go upstream together (held to the end of the loop turn)
    and the replies that arrive together go to the client together: every call is answered with
    its own result under its own id, and a `notifications/cancelled` written right after a call,
    in the same read, cancels it upstream (it is held behind the call, never ahead of it)."""
    name, command = upstream
    tool = "add" if name == "notes" else "get-sum"
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}

    def line(message: dict[str, Any]) -> bytes:
        return json.dumps(message).encode() + b"\n"

    with deadline(40):
        async with await anyio.open_process(proxy_command(command), stderr=subprocess.DEVNULL) as proxy:
            assert proxy.stdin is not None and proxy.stdout is not None
            replies: dict[Any, Any] = {}
            pending = b""

            async def until(ids: set[int]) -> None:
                nonlocal pending
                assert proxy.stdout is not None
                while not ids <= set(replies):
                    pending += await proxy.stdout.receive()
                    *lines, pending = pending.split(b"\n")
                    for raw in lines:
                        reply = json.loads(raw)
                        if "id" in reply and "method" not in reply:
                            replies[reply["id"]] = reply

            await proxy.stdin.send(line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize}))
            await until({1})
            await proxy.stdin.send(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            calls = {
                n: {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": tool, "arguments": {"a": n, "b": 1000}},
                }
                for n in range(10, 40)
            }
            await proxy.stdin.send(b"".join(line(call) for call in calls.values()))  # one write
            await until(set(calls))
            for n in calls:
                result = replies[n]["result"]
                assert result.get("isError") is not True, result
                assert str(n + 1000) in json.dumps(result["content"]), result
            if name == "notes":  # its `sleep` counts the cancellations it hears
                sleep = {"name": "sleep", "arguments": {"seconds": 30}}
                cancel = {"requestId": 50, "reason": "changed my mind"}
                await proxy.stdin.send(
                    line({"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": sleep})
                    + line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
                )
                count: Any = None
                for attempt in range(100):
                    ask = {"name": "cancellations", "arguments": {}}
                    await proxy.stdin.send(
                        line({"jsonrpc": "2.0", "id": 100 + attempt, "method": "tools/call", "params": ask})
                    )
                    await until({100 + attempt})
                    count = replies[100 + attempt]["result"].get("structuredContent")
                    if count == {"result": 1}:
                        break
                    await anyio.sleep(0.05)
                assert count == {"result": 1}
                assert 50 not in replies  # a cancelled request is not answered
            await proxy.stdin.aclose()
            assert await proxy.wait() == 0
