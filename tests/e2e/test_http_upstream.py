"""Remote upstreams over HTTP: the three transports detected, forwarded like a stdio upstream,
and every way an HTTP server can fail turned into a clear answer. Real peers on 127.0.0.1: the
SDK notes server (both eras), server-everything in its `streamableHttp` and `sse` modes, and a
faulty server of our own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CreateMessageResult, ElicitResult, TextContent

from frugal_proxy.upstream.http import HttpUpstreamConnection
from tests.conftest import ROOT, everything_command, everything_js, refusing_port
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

HTTP_SERVERS = ROOT / "tests" / "servers" / "http_servers.py"
LOOPBACK = ROOT / "tests" / "servers" / "loopback.mjs"


def _wait_for_line(read: Any, prefix: str, process: subprocess.Popen[bytes], deadline: float = 20.0) -> str:
    end = time.monotonic() + paced(deadline)
    while time.monotonic() < end:
        for line in read():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        if process.poll() is not None:
            pytest.fail(f"test server exited with {process.returncode} before listening")
        time.sleep(0.05)
    pytest.fail("test server did not start listening in time")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.stdout is not None:
        process.stdout.close()
    process.terminate()
    try:
        process.wait(paced(5))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(paced(5))


def _python_server(kind: str) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, str(HTTP_SERVERS), kind], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if not line.startswith("PORT "):
        _stop(process)
        pytest.fail(f"{kind} server did not report its port")
    try:
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def notes_http() -> Iterator[str]:
    """The notes server (MCPServer) over Streamable HTTP; both eras on one endpoint."""
    for base in _python_server("notes"):
        yield f"{base}/mcp"


@pytest.fixture(scope="module")
def faulty_http() -> Iterator[str]:
    yield from _python_server("faulty")


def _everything(mode: str, tmp: Path) -> Iterator[str]:
    log = tmp / f"everything-{mode}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["node", "--import", str(LOOPBACK), str(everything_js()), mode],
            env={**os.environ, "PORT": "0"},
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        port = _wait_for_line(lambda: log.read_text(errors="replace").splitlines(), "FRUGAL_LISTENING ", process)
        yield f"http://127.0.0.1:{port}/{'mcp' if mode == 'streamableHttp' else 'sse'}"
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def everything_streamable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _everything("streamableHttp", tmp_path_factory.mktemp("everything"))


@pytest.fixture(scope="module")
def everything_sse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _everything("sse", tmp_path_factory.mktemp("everything"))


def wrap(url: str, *options: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "frugal_proxy", *options, "--", url])


def text(result: Any) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def sampling(context: Any, params: Any) -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text="sampled!"), model="fake")


async def elicitation(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="decline")


# -- the three transports ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "mode", "era"),
    [
        ("notes_http", "modern", "modern"),
        ("everything_streamable", "streamable", "legacy"),
        ("everything_sse", "sse", "legacy"),
    ],
)
async def test_each_transport_is_detected(server: str, mode: str, era: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(server)
    with deadline(30):
        async with HttpUpstreamConnection(url, name="remote") as upstream:
            await upstream.ensure_ready()
            assert (upstream.mode, upstream.era) == (mode, era)
            state = upstream.state()
            assert state["state"] == "up" and state["url"] == url
            if era == "legacy":
                await upstream.initialize(
                    {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
                )
            else:
                assert upstream.discover_result is not None
            params: dict[str, Any] = {"name": "get-sum" if "everything" in server else "add"}
            params["arguments"] = {"a": 2, "b": 3}
            if era == "modern":
                params["_meta"] = HttpUpstreamConnection.discover_params()["_meta"]
            reply = await upstream.request("tools/call", params)
            assert "5" in json.dumps(json.loads(bytes(reply["result"])))


async def test_an_ended_session_is_initialized_again(everything_streamable: str) -> None:
    with deadline(30):
        async with HttpUpstreamConnection(everything_streamable, name="remote") as upstream:
            await upstream.initialize(
                {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            )
            first = upstream._session_id
            assert first is not None
            async with httpx2.AsyncClient() as other:  # the server ends the session (as if it restarted)
                await other.delete(everything_streamable, headers={"Mcp-Session-Id": first})
            reply = await upstream.request("tools/list", {})
            assert "result" in reply, bytes(reply.get("error", b""))
            assert upstream._session_id not in (None, first)


# -- through the proxy, the way clients use it ---------------------------------------------------


async def test_a_modern_server_through_the_proxy_equals_direct(notes_http: str, mode: str) -> None:
    with deadline(60):
        async with Client(notes_http, mode=mode, cache=None) as direct:  # type: ignore[arg-type]
            expected_tools = [tool.name for tool in (await direct.list_tools()).tools]
            expected = (await direct.call_tool("echo", {"text": "héllo"})).model_dump()
        async with Client(wrap(notes_http), mode=mode, cache=None) as client:  # type: ignore[arg-type]
            listed = [tool.name for tool in (await client.list_tools()).tools]
            assert [name for name in listed if not name.startswith("frugal__")] == expected_tools  # minus its own
            got = (await client.call_tool("echo", {"text": "héllo"})).model_dump()
            assert got["content"] == expected["content"]
            assert got["structured_content"] == expected["structured_content"]
            seen: list[float] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append(value)

            done = await client.call_tool("count", {"steps": 3}, progress_callback=progress)
            assert text(done) == "counted 3" and seen == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("server", ["everything_streamable", "everything_sse"])
async def test_a_legacy_server_through_the_proxy(server: str, mode: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(server)
    with deadline(60):
        async with Client(
            wrap(url),
            mode=mode,  # type: ignore[arg-type]
            cache=None,
            sampling_callback=sampling,
            elicitation_callback=elicitation,
        ) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"get-sum", "trigger-sampling-request", "trigger-elicitation-request"} <= names
            assert text(await client.call_tool("get-sum", {"a": 2, "b": 3})) == "The sum of 2 and 3 is 5."
            seen: list[float] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append(value)

            await client.call_tool(
                "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=progress
            )
            assert seen == [1.0, 2.0, 3.0]
            sampled = await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 5})
            assert "sampled!" in text(sampled)
            elicited = await client.call_tool("trigger-elicitation-request", {})
            assert "decline" in text(elicited).lower()


def write_config(tmp_path: Path, urls: dict[str, str]) -> Path:
    tables = "".join(f'\n[upstreams.{name}]\nurl = "{url}"\n' for name, url in urls.items())
    path = tmp_path / "frugal.toml"
    # The stdio upstream is server-everything: node starts fast, so a loaded machine does not
    # push its start-up past the discover probe's timeout.
    path.write_text(f"[upstreams.local]\ncommand = {json.dumps(everything_command())}\n{tables}")
    return path


async def test_serve_mixes_stdio_and_remote_upstreams(
    tmp_path: Path, mode: str, everything_streamable: str, notes_http: str
) -> None:
    with refusing_port() as port:  # refused all along: no other test's server gets it meanwhile
        dead = f"http://127.0.0.1:{port}/mcp"
        config = write_config(tmp_path, {"remote": notes_http, "everything": everything_streamable, "dead": dead})
        env = {**os.environ, "FRUGAL_HOME": str(tmp_path / "home")}
        serve = StdioServerParameters(
            command=sys.executable, args=["-m", "frugal_proxy", "serve", "--config", str(config)], env=env
        )
        with deadline(60):
            async with Client(serve, mode=mode, cache=None, sampling_callback=sampling) as client:  # type: ignore[arg-type]
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert {"local__get-sum", "remote__add", "everything__get-sum"} <= names
                assert text(await client.call_tool("local__get-sum", {"a": 1, "b": 2})) == "The sum of 1 and 2 is 3."
                assert text(await client.call_tool("remote__add", {"a": 2, "b": 2})) == "4"
                summed = await client.call_tool("everything__get-sum", {"a": 2, "b": 3})
                assert text(summed) == "The sum of 2 and 3 is 5."
                asked = {"prompt": "x", "maxTokens": 5}
                sampled = await client.call_tool("everything__trigger-sampling-request", asked)
                assert "sampled!" in text(sampled)
                down = await client.call_tool("dead__anything", {})
                assert down.is_error and "connection refused" in text(down) and dead in text(down)
                assert text(await client.call_tool("remote__add", {"a": 1, "b": 1})) == "2"


# -- failures ------------------------------------------------------------------------------------


def run_wrap(url: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "frugal_proxy", *options, "--", url],
        input="",
        capture_output=True,
        text=True,
        timeout=paced(30),
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("down/mcp", "failed with HTTP 500"),
        ("html/mcp", "not JSON-RPC"),
    ],
)
def test_a_server_that_cannot_be_used_stops_the_wrap_form_with_a_reason(
    faulty_http: str, path: str, expected: str
) -> None:
    done = run_wrap(f"{faulty_http}/{path}")
    assert done.returncode == 2
    assert expected in done.stderr and f"{faulty_http}/{path}" in done.stderr


def test_a_dead_server_is_named_with_what_to_do() -> None:
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}/mcp"
        done = run_wrap(url)
    assert done.returncode == 2
    assert "connection refused" in done.stderr and url in done.stderr
    assert "check that the server is running" in done.stderr


def test_secrets_in_the_url_and_headers_are_never_logged() -> None:
    with refusing_port() as port:
        url = f"http://user:hunter2@127.0.0.1:{port}/mcp?api_key=hunter2"
        done = run_wrap(url, "--log-level", "debug", "--header", "Authorization: Bearer hunter2")
    assert done.returncode == 2 and "api_key=…" in done.stderr
    assert "hunter2" not in done.stderr and "hunter2" not in done.stdout


async def test_http_errors_become_tool_errors_and_others_keep_working(faulty_http: str, mode: str) -> None:
    with deadline(60):
        async with Client(wrap(f"{faulty_http}/mcp"), mode=mode, cache=None) as client:  # type: ignore[arg-type]
            assert {tool.name for tool in (await client.list_tools()).tools} >= {"ok", "boom", "garbage", "busy"}
            boom = await client.call_tool("boom", {})
            assert boom.is_error and "HTTP 500" in text(boom) and faulty_http in text(boom)
            garbage = await client.call_tool("garbage", {})
            assert garbage.is_error and "not JSON-RPC" in text(garbage)
            busy = await client.call_tool("busy", {})
            assert busy.is_error and "HTTP 429" in text(busy) and "retry after 7 s" in text(busy)
            assert text(await client.call_tool("ok", {})) == "fine"


async def test_an_oversized_reply_is_refused_and_the_connection_goes_on(notes_http: str, mode: str) -> None:
    with deadline(60):
        async with Client(
            wrap(notes_http, "--max-message-bytes", "1000000"),
            mode=mode,  # type: ignore[arg-type]
            cache=None,
        ) as client:
            big = await client.call_tool("blob", {"size": 2_000_000})
            assert big.is_error and "over the 1000000-byte cap" in text(big)
            assert text(await client.call_tool("add", {"a": 1, "b": 1})) == "2"


# -- cancelling only what went out ---------------------------------------------------------------


class HoldingTransport(httpx2.AsyncBaseTransport):
    """The real network, except that the next POST is held before any of it is written (as one
    waiting for a free connection is) while `hold_next` is set; the JSON of every POST that goes
    out is kept in `posted`."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.hold_next = False
        self.held = anyio.Event()
        self.called = anyio.Event()  # a tools/call went out
        self.posted: list[Any] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and self.hold_next:
            self.hold_next = False
            self.held.set()
            await anyio.sleep_forever()  # cancelled with the call; nothing of it was written
        if request.method == "POST":
            self.posted.append(json.loads(await request.aread()))
            if self.posted[-1].get("method") == "tools/call":
                self.called.set()
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def cancels(self) -> list[Any]:
        return [m["params"]["requestId"] for m in self.posted if m.get("method") == "notifications/cancelled"]


@pytest.mark.parametrize(("server", "mode"), [("everything_streamable", "streamable"), ("everything_sse", "sse")])
async def test_a_cancelled_request_is_cancelled_upstream_only_if_it_went_out(
    server: str, mode: str, request: pytest.FixtureRequest
) -> None:
    """A session-era request cancelled before its POST was written is unknown to the server: no
    `notifications/cancelled` follows it. One cancelled after it went out is cancelled upstream."""
    transport = HoldingTransport()
    with deadline(30):
        async with HttpUpstreamConnection(
            request.getfixturevalue(server), name="remote", transport=transport
        ) as upstream:
            await upstream.initialize(
                {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            )
            assert upstream.mode == mode
            slow = {"name": "trigger-long-running-operation", "arguments": {"duration": 5, "steps": 5}}
            transport.hold_next = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(upstream.request, "tools/call", slow)
                await transport.held.wait()
                tg.cancel_scope.cancel()
            assert transport.cancels() == []
            async with anyio.create_task_group() as tg:
                tg.start_soon(upstream.request, "tools/call", slow)
                await transport.called.wait()
                await anyio.sleep(0.2)
                tg.cancel_scope.cancel()
            sent_id = next(m["id"] for m in transport.posted if m.get("method") == "tools/call")
            assert transport.cancels() == [sent_id]
            reply = await upstream.request("tools/call", {"name": "get-sum", "arguments": {"a": 2, "b": 3}})
            assert "5" in json.dumps(json.loads(bytes(reply["result"])))  # the connection goes on
