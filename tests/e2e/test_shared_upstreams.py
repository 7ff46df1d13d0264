"""Session-era HTTP sessions share one connection per upstream: SDK clients (session era, no
sampling, elicitation or roots declared) over HTTP to `frugal-proxy --http` and `serve --http`,
the notes server as the stdio upstream, its processes counted as the proxy's children."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import CreateMessageResult, ElicitResult, TextContent

from tests.conftest import everything_command, everything_js, notes_command
from tests.e2e.test_http_downstream import Proxy, sdk_client, start
from tests.e2e.test_http_upstream import LOOPBACK, _stop, _wait_for_line
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio


class Heard:
    """The notifications one client received, by kind (and the URI of resource updates)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.updated: list[str] = []
        self.logged: list[str] = []
        self.changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        root = getattr(message, "root", message)
        name = type(root).__name__
        self.kinds.append(name)
        if name == "ResourceUpdatedNotification":
            self.updated.append(str(root.params.uri))
        if name == "LoggingMessageNotification":
            self.logged.append(str(root.params.level))
        if name == "ResourceListChangedNotification":
            self.changed.set()


def plain_client(url: str, heard: Heard | None = None) -> Client:
    """A session-era client that declares nothing the upstream could ask it for."""
    return Client(url, mode="legacy", cache=None, message_handler=heard)


BASELINE: dict[int, set[int]] = {}  # the proxy's children before any session: its own connection


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    started = start(notes_command())
    BASELINE[started.process.pid] = started.children()
    yield started
    started.stop()


async def until(holds: Callable[[], bool], seconds: float = 15.0) -> None:
    """Return once `holds()` is true; fail after `seconds` (paced: tests/pace.py)."""
    for _ in range(int(paced(seconds) / 0.05)):
        if holds():
            return
        await anyio.sleep(0.05)
    assert holds()


async def settle(proxy: Proxy, expected: set[int], seconds: float = 15.0) -> set[int]:
    """The proxy's children once they equal `expected` (or after `seconds`)."""
    for _ in range(int(paced(seconds) / 0.1)):
        if proxy.children() == expected:
            break
        await anyio.sleep(0.1)
    return proxy.children()


async def test_two_sessions_share_one_upstream_process(proxy: Proxy) -> None:
    with deadline(60):
        before = await settle(proxy, BASELINE[proxy.process.pid])  # an earlier test's shared one closed
        async with plain_client(proxy.url) as first, plain_client(proxy.url) as second:
            assert len(proxy.children() - before) == 1
            await first.call_tool("add_note", {"name": "shared-one", "text": "first's"})
            # One notes server behind both: the second sees the first's note.
            assert "shared-one" in str((await second.call_tool("list_notes", {})).content)
            assert (await second.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
        # The last session left: its connection closes after the grace period.
        assert await settle(proxy, before) == before


async def test_each_session_gets_its_own_progress(proxy: Proxy) -> None:
    seen: dict[str, list[tuple[float, float | None]]] = {"a": [], "b": []}

    def recorder(who: str) -> Any:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen[who].append((progress, total))

        return on_progress

    with deadline(60):
        async with plain_client(proxy.url) as first, plain_client(proxy.url) as second:

            async def run(client: Client, who: str, steps: int) -> None:
                result = await client.call_tool(
                    "count", {"steps": steps, "pause": 0.05}, progress_callback=recorder(who)
                )
                assert not result.is_error

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, first, "a", 4)
                tg.start_soon(run, second, "b", 6)
    assert seen["a"] == [(i, 4) for i in range(1, 5)]
    assert seen["b"] == [(i, 6) for i in range(1, 7)]


async def test_list_changes_reach_every_session() -> None:
    """server-everything registers a resource for what `gzip-file-as-resource` made, and says
    its resource list changed: both sessions on the connection hear it."""
    served = start(everything_command())
    heard_a, heard_b = Heard(), Heard()
    try:
        with deadline(60):
            async with plain_client(served.url, heard_a) as first, plain_client(served.url, heard_b):
                data = "data:text/plain;base64,aGVsbG8gc2hhcmVk"
                await first.call_tool("gzip-file-as-resource", {"name": "shared.gz", "data": data})
                await heard_a.changed.wait()
                await heard_b.changed.wait()
    finally:
        served.stop()


async def test_updates_reach_only_the_sessions_subscribed() -> None:
    """server-everything sends `resources/updated` for every URI its (one, shared) client
    subscribed to, at once when toggled and every 5 s: each session hears its own URIs only, and
    one session's unsubscribe leaves the other's subscription to the same URI standing."""
    served = start(everything_command())
    heard_a, heard_b = Heard(), Heard()
    try:
        with deadline(60):
            async with plain_client(served.url, heard_a) as first, plain_client(served.url, heard_b) as second:
                with pytest.warns(MCPDeprecationWarning):
                    await first.subscribe_resource("demo://for-a")
                    await second.subscribe_resource("demo://for-b")
                    await second.subscribe_resource("demo://both")
                    await first.subscribe_resource("demo://both")
                await first.call_tool("toggle-subscriber-updates", {})
                await until(lambda: len(heard_a.updated) >= 2 and len(heard_b.updated) >= 2)
                assert sorted(heard_a.updated) == ["demo://both", "demo://for-a"]
                assert sorted(heard_b.updated) == ["demo://both", "demo://for-b"]
                with pytest.warns(MCPDeprecationWarning):
                    await first.unsubscribe_resource("demo://both")
                await until(
                    lambda: heard_a.updated.count("demo://for-a") >= 2 and heard_b.updated.count("demo://both") >= 2
                )
                assert heard_a.updated.count("demo://both") == 1
                assert set(heard_b.updated) == {"demo://both", "demo://for-b"}
    finally:
        served.stop()


async def test_each_session_hears_logging_at_its_own_level() -> None:
    """server-everything logs each subscribe at `info`, honouring the level it was set to: the
    shared connection is set to the most verbose level asked (info), and the session that asked
    for `error` does not hear the info message the other one caused. Its absence is checked
    once a list change sent after it has reached that session on the same stream (a reply to
    one of its calls comes on another and says nothing of what its GET stream still holds)."""
    served = start(everything_command())
    heard_quiet, heard_verbose = Heard(), Heard()
    try:
        with deadline(60):
            async with (
                plain_client(served.url, heard_quiet) as quiet,
                plain_client(served.url, heard_verbose) as verbose,
            ):
                with pytest.warns(MCPDeprecationWarning):
                    await quiet.set_logging_level("error")
                    await verbose.set_logging_level("info")
                    await verbose.subscribe_resource("demo://logged")
                await until(lambda: "info" in heard_verbose.logged)
                data = "data:text/plain;base64,aGVsbG8gc2hhcmVk"
                await quiet.call_tool("gzip-file-as-resource", {"name": "after.gz", "data": data})
                await heard_quiet.changed.wait()  # what the proxy sent quiet before it has arrived
                assert heard_quiet.logged == []
    finally:
        served.stop()


async def test_one_session_leaving_does_not_break_the_other(proxy: Proxy) -> None:
    with deadline(60):
        async with plain_client(proxy.url) as staying:
            async with plain_client(proxy.url) as leaving:
                assert (await leaving.call_tool("echo", {"text": "bye"})).content
            children = proxy.children()
            assert (await staying.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
            assert proxy.children() == children


async def test_clients_that_can_be_asked_keep_their_own_connections(proxy: Proxy) -> None:
    """Sampling, elicitation and roots declared: the upstream may ask the client things at any
    time, which a shared stdio connection could not route; each such session has its own."""
    with deadline(60):
        async with plain_client(proxy.url) as plain:
            before = proxy.children()
            async with sdk_client(proxy.url, "legacy") as asked:
                assert len(proxy.children() - before) == 1
                assert (await asked.call_tool("summarise", {"topic": "tides"})).content
                assert (await plain.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
            assert await settle(proxy, before) == before


async def test_sessions_that_can_be_asked_keep_their_own_stdio_upstream(proxy: Proxy) -> None:
    """Sampling and elicitation declared, roots not: a stdio server's request names no call, so
    two such sessions cannot share its process; each has its own, and its own requests."""
    asked: dict[str, list[str]] = {"a": [], "b": []}
    with deadline(60):
        before = await settle(proxy, BASELINE[proxy.process.pid])
        async with asked_client(proxy.url, "a", asked["a"]) as first, asked_client(proxy.url, "b", asked["b"]):
            assert len(proxy.children() - before) == 2
            result = await first.call_tool("summarise", {"topic": "tides"})
            assert not result.is_error and "by a" in result_text(result)
        assert asked == {"a": ["sampling"], "b": []}
        assert await settle(proxy, before) == before


async def test_share_false_gives_each_session_its_own_process(tmp_path: Path) -> None:
    config = tmp_path / "frugal.toml"
    command = ", ".join(f'"{part}"' for part in notes_command())
    config.write_text(
        f"[upstreams.notes]\ncommand = [{command}]\nshare = false\n\n[upstreams.other]\ncommand = [{command}]\n"
    )
    served = Proxy([sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"])
    try:
        url = served.wait_listening()
        with deadline(60):
            before = served.children()
            async with plain_client(url) as first, plain_client(url) as second:
                # notes: one each; other: one shared
                assert len(served.children() - before) == 3
                await first.call_tool("notes__add_note", {"name": "own", "text": "x"})
                assert "own" not in str((await second.call_tool("notes__list_notes", {})).content)
                await first.call_tool("other__add_note", {"name": "common", "text": "y"})
                assert "common" in str((await second.call_tool("other__list_notes", {})).content)
    finally:
        assert served.stop() == 0


async def test_a_server_request_on_a_shared_connection_is_refused_as_the_client_would(proxy: Proxy) -> None:
    """The notes server's `summarise` asks its client for sampling; sessions that declared none
    share the connection, and the proxy answers the request as such a client does (an error),
    so the tool fails its own way and the connection keeps serving."""
    with deadline(60):
        async with plain_client(proxy.url) as first, plain_client(proxy.url) as second:
            try:
                result = await first.call_tool("summarise", {"topic": "tides"})
                refused = result.is_error
            except MCPError:
                refused = True
            assert refused
            assert (await second.call_tool("add", {"a": 4, "b": 5})).structured_content == {"result": 9}


class EverythingHttp:
    """server-everything over Streamable HTTP on 127.0.0.1, its log read for the sessions it opened."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                ["node", "--import", str(LOOPBACK), str(everything_js()), "streamableHttp"],
                env={**os.environ, "PORT": "0"},
                stdout=sink,
                stderr=sink,
            )
        port = _wait_for_line(self._lines, "FRUGAL_LISTENING ", self.process)
        self.url = f"http://127.0.0.1:{port}/mcp"

    def _lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def sessions(self) -> int:
        return sum("Session initialized with ID" in line for line in self._lines())


def asked_client(url: str, who: str, asked: list[str]) -> Client:
    """A session-era client that declares sampling and elicitation (not roots), answering each
    with its own name and noting what it was asked."""

    async def sampling(context: Any, params: Any) -> CreateMessageResult:
        asked.append("sampling")
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text=f"by {who}"), model=who)

    async def elicitation(context: Any, params: Any) -> ElicitResult:
        asked.append("elicitation")
        return ElicitResult(action="accept", content={"name": f"by {who}", "check": True})

    return Client(url, mode="legacy", cache=None, sampling_callback=sampling, elicitation_callback=elicitation)


def result_text(result: Any) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def test_sessions_that_can_be_asked_share_an_http_upstream_and_each_gets_its_own_requests(
    tmp_path: Path,
) -> None:
    """server-everything over Streamable HTTP sends each sampling or elicitation request on the
    stream of the call that caused it: two sessions that declare both share one upstream session,
    and with their calls under way at once, each request reaches the client whose call it is."""
    everything = EverythingHttp(tmp_path / "everything.log")
    served = start([everything.url])
    asked: dict[str, list[str]] = {"a": [], "b": []}
    texts: dict[tuple[str, str], str] = {}
    try:
        with deadline(60):
            before = everything.sessions()  # the proxy's own connection
            async with asked_client(served.url, "a", asked["a"]) as first:
                async with asked_client(served.url, "b", asked["b"]) as second:
                    assert everything.sessions() - before == 1  # one upstream session for both

                    async def call(client: Client, who: str, tool: str, arguments: dict[str, Any]) -> None:
                        result = await client.call_tool(tool, arguments)
                        assert not result.is_error, result_text(result)
                        texts[who, tool] = result_text(result)

                    sample = {"prompt": "tides", "maxTokens": 5}
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call, first, "a", "trigger-sampling-request", sample)
                        tg.start_soon(call, second, "b", "trigger-sampling-request", sample)
                        tg.start_soon(call, first, "a", "trigger-elicitation-request", {})
                        tg.start_soon(call, second, "b", "trigger-elicitation-request", {})
                    assert everything.sessions() - before == 1
    finally:
        assert served.stop() == 0
        _stop(everything.process)
    assert sorted(asked["a"]) == sorted(asked["b"]) == ["elicitation", "sampling"]
    for who, other in (("a", "b"), ("b", "a")):
        for tool in ("trigger-sampling-request", "trigger-elicitation-request"):
            assert f"by {who}" in texts[who, tool] and f"by {other}" not in texts[who, tool]
