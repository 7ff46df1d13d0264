"""`frugal-proxy --http ADDR -- <cmd>` and `serve --http`: the downstream Streamable HTTP endpoint.

The SDK client in both modes through the proxy (notes server and server-everything as stdio
upstreams), then a plain HTTP client for every rule the endpoint enforces. Everything listens on
127.0.0.1 with port 0; the proxy reports the port it got on stderr.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

from tests.conftest import NOTES_SERVER, everything_command, notes_command, proxy_command, show_stderr_on_failure
from tests.e2e.test_wrap_stdio import (
    CALLS,
    SERVER_REQUESTS,
    check_progress_in_order,
    dump,
    elicitation,
    roots,
    sampling,
)
from tests.e2e.test_wrap_stdio import client as stdio_client
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


class Proxy:
    """A frugal-proxy process serving HTTP on 127.0.0.1, its stderr collected."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        show_stderr_on_failure(self.process, self.lines)
        self.url = ""
        self._said = threading.Condition()  # notified on every line of stderr
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._said:
                self.lines.append(line)
                self._said.notify_all()
            if "frugal-proxy: listening on " in line and not self.url:
                # The whole line and nothing else (an upstream's copied stderr once landed
                # inside it: the client was sent to a path that is no endpoint and got 404s).
                found = re.fullmatch(r"frugal-proxy: listening on (http://\S+)", line)
                self.url = found.group(1) if found else ""
                self._listening.set()
        self._listening.set()

    def wait_for_line(self, *parts: str, timeout: float = 60.0) -> str:
        """The first line of its stderr that holds every one of `parts`, waited for (blocking:
        run it in a thread); fails the test after `timeout` seconds (paced: tests/pace.py)."""
        timeout = paced(timeout)
        with self._said:
            found = self._said.wait_for(
                lambda: next((line for line in self.lines if all(part in line for part in parts)), None), timeout
            )
        if found is None:
            pytest.fail(f"the proxy did not log {parts!r} within {timeout:g} s:\n" + "\n".join(self.lines[-20:]))
        return found

    def wait_listening(self, timeout: float = 30.0) -> str:
        """The URL it serves, once it says so on stderr; fails the test after `timeout` seconds (paced)."""
        self._listening.wait(paced(timeout))
        if not self.url:
            self.stop()
            pytest.fail("the proxy did not say where it listens, alone on a line:\n" + "\n".join(self.lines[-20:]))
        return self.url

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def children(self) -> set[int]:
        """Process ids whose parent is the proxy (its stdio upstreams)."""
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.process.pid:
                    found.add(int(entry.name))
        return found

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(paced(15))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(paced(5))
        self._reader.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()
        return self.process.returncode


def start(upstream: list[str], *options: str, env: dict[str, str] | None = None) -> Proxy:
    proxy = Proxy(proxy_command(upstream, "--http", "127.0.0.1:0", *options), env)
    proxy.wait_listening()
    return proxy


def serve_config(config: Path, *options: str) -> Proxy:
    """`serve --config CONFIG --http` on 127.0.0.1, listening."""
    proxy = Proxy(
        [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0", *options]
    )
    proxy.wait_listening()
    return proxy


@pytest.fixture(scope="module")
def notes_proxy() -> Iterator[Proxy]:
    proxy = start(notes_command())
    yield proxy
    proxy.stop()


def sdk_client(url: str, mode: str) -> Client:
    return Client(
        url,
        mode=mode,  # type: ignore[arg-type]
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
        cache=None,
    )


def modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    headers.update(extra)
    return headers


def modern_body(method: str, params: dict[str, Any] | None = None, ident: int = 1, meta: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": {**(params or {}), "_meta": meta or META}}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}
LEGACY_HEADERS = {"Accept": "application/json, text/event-stream"}


# -- the SDK client through the endpoint ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["notes", "everything"])
async def test_sdk_clients_see_the_server_as_directly(name: str, mode: str) -> None:
    command = notes_command() if name == "notes" else everything_command()
    proxy = start(command)
    try:
        with deadline(50):
            async with (
                stdio_client(command, mode) as direct,
                sdk_client(proxy.url, mode) as proxied,
            ):
                direct_tools = [dump(t) for t in (await direct.list_tools()).tools]
                tools = (await proxied.list_tools()).tools
                assert [dump(t) for t in tools if not t.name.startswith("frugal__")] == direct_tools
                for tool, arguments in CALLS[name]:
                    assert dump(await proxied.call_tool(tool, arguments)) == dump(
                        await direct.call_tool(tool, arguments)
                    ), tool
                await check_progress_in_order(proxied, name)
    finally:
        proxy.stop()


@pytest.mark.parametrize("name", ["notes", "everything"])
async def test_sampling_round_trip(name: str, mode: str) -> None:
    command = notes_command() if name == "notes" else everything_command()
    tool, arguments, expected = SERVER_REQUESTS[name]["sampling"]
    proxy = start(command)
    try:
        with deadline(50):
            async with sdk_client(proxy.url, mode) as proxied:
                result = await proxied.call_tool(tool, arguments)
        text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
        assert not result.is_error, text
        assert expected in text
    finally:
        proxy.stop()


async def test_two_session_era_clients_get_their_own_upstream_processes(notes_proxy: Proxy) -> None:
    """These clients declare sampling, elicitation and roots, so their sessions share no upstream
    connection (tests/e2e/test_shared_upstreams.py has the ones that do)."""
    with deadline(50):
        before = notes_proxy.children()
        async with sdk_client(notes_proxy.url, "legacy") as first, sdk_client(notes_proxy.url, "legacy") as second:
            during = notes_proxy.children()
            assert len(during - before) == 2
            await first.call_tool("add_note", {"name": "mine", "text": "first's"})
            # Each session has its own notes server: the second does not see the first's note.
            assert "mine" in str((await first.call_tool("list_notes", {})).content)
            assert "mine" not in str((await second.call_tool("list_notes", {})).content)
        # Leaving the client sends DELETE: both sessions end and their processes exit.
        for _ in range(int(paced(10) / 0.1)):
            if notes_proxy.children() == before:
                break
            await anyio.sleep(0.1)
        assert notes_proxy.children() == before


# -- 2026-07-28 rules ---------------------------------------------------------------------------------


async def test_modern_requests_are_checked_against_their_headers(notes_proxy: Proxy) -> None:
    url = notes_proxy.url
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        ok = await http.post(url, json=modern_body("tools/list"), headers=modern_headers("tools/list"))
        assert ok.status_code == 200, ok.text
        assert "mcp-session-id" not in ok.headers
        assert any(tool["name"] == "add" for tool in ok.json()["result"]["tools"])

        wrong_method = await http.post(url, json=modern_body("tools/list"), headers=modern_headers("prompts/list"))
        assert wrong_method.status_code == 400
        assert wrong_method.json()["error"]["code"] == -32020

        call = modern_body("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        wrong_name = await http.post(url, json=call, headers=modern_headers("tools/call", "echo"))
        assert wrong_name.status_code == 400
        assert wrong_name.json()["error"]["code"] == -32020
        no_name = await http.post(url, json=call, headers=modern_headers("tools/call"))
        assert no_name.json()["error"]["code"] == -32020
        right = await http.post(url, json=call, headers=modern_headers("tools/call", "add"))
        assert right.json()["result"]["structuredContent"] == {"result": 3}
        encoded = await http.post(url, json=call, headers=modern_headers("tools/call", "=?base64?YWRk?="))
        assert encoded.json()["result"]["structuredContent"] == {"result": 3}

        other_meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
        mismatch = await http.post(
            url, json=modern_body("tools/list", meta=other_meta), headers=modern_headers("tools/list")
        )
        assert mismatch.status_code == 400
        assert mismatch.json()["error"]["code"] == -32020

        future = modern_headers("tools/list", **{"MCP-Protocol-Version": "2099-01-01"})
        unsupported = await http.post(url, json=modern_body("tools/list", meta=other_meta), headers=future)
        assert unsupported.status_code == 400
        error = unsupported.json()["error"]
        assert error["code"] == -32022
        assert MODERN in error["data"]["supported"]

        unknown = await http.post(url, json=modern_body("no/such"), headers=modern_headers("no/such"))
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == -32601

        note = {"jsonrpc": "2.0", "method": "notifications/whatever", "params": {"_meta": META}}
        accepted = await http.post(url, json=note, headers=modern_headers("notifications/whatever"))
        assert accepted.status_code == 202

        for method in ("GET", "DELETE"):
            refused = await http.request(method, url, headers={"MCP-Protocol-Version": MODERN, "Mcp-Session-Id": "x"})
            assert refused.status_code == 405
            assert refused.headers["allow"] == "POST"
            assert "mcp-session-id" not in refused.headers


async def test_progress_rides_on_the_requests_own_stream(notes_proxy: Proxy) -> None:
    body = modern_body("tools/call", {"name": "count", "arguments": {"steps": 3}})
    body["params"]["_meta"] = {**META, "progressToken": "p-1"}
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        reply = await http.post(notes_proxy.url, json=body, headers=modern_headers("tools/call", "count"))
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
    import json

    messages = [json.loads(event) for event in events]
    assert [m["params"]["progress"] for m in messages[:-1]] == [1, 2, 3]
    assert all(m["params"]["progressToken"] == "p-1" for m in messages[:-1])
    assert messages[-1]["id"] == 1 and "result" in messages[-1]


async def test_closing_the_stream_cancels_the_call_upstream(notes_proxy: Proxy) -> None:
    url = notes_proxy.url
    count_call = modern_body("tools/call", {"name": "cancellations", "arguments": {}})
    count_headers = modern_headers("tools/call", "cancellations")
    body = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 30}}, ident=7)
    body["params"]["_meta"] = {**META, "progressToken": 7}
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            before = (await http.post(url, json=count_call, headers=count_headers)).json()["result"]
            async with http.stream("POST", url, json=body, headers=modern_headers("tools/call", "sleep")) as stream:
                assert stream.status_code == 200
                await anyio.sleep(paced(0.5))  # long enough for the call to reach the upstream
            for _ in range(int(paced(10) / 0.1)):
                after = (await http.post(url, json=count_call, headers=count_headers)).json()["result"]
                if after["structuredContent"]["result"] > before["structuredContent"]["result"]:
                    break
                await anyio.sleep(0.1)
            assert after["structuredContent"]["result"] == before["structuredContent"]["result"] + 1


class Cancellations:
    """The notes server's count of the cancellations it has seen (its `cancellations` tool),
    asked in one era: 2026-07-28 without `headers`, else on the session they name."""

    def __init__(self, http: httpx2.AsyncClient, url: str, headers: dict[str, str] | None = None) -> None:
        self.http, self.url = http, url
        if headers is None:
            self.body = modern_body("tools/call", {"name": "cancellations", "arguments": {}})
            self.headers = modern_headers("tools/call", "cancellations")
        else:
            self.body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "cancellations"}}
            self.headers = headers

    async def count(self) -> int:
        reply = (await self.http.post(self.url, json=self.body, headers=self.headers)).json()
        return int(reply["result"]["structuredContent"]["result"])

    async def rise_to(self, expected: int) -> None:
        """Wait (at most 10 s, paced) for the count to pass `expected` - 1, then check it is `expected`."""
        for _ in range(int(paced(10) / 0.1)):
            if await self.count() >= expected:
                break
            await anyio.sleep(0.1)
        assert await self.count() == expected


async def open_session(http: httpx2.AsyncClient, url: str, version: str = "2025-11-25") -> dict[str, str]:
    """Initialize a session-era session; the headers its later requests carry."""
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": version}}
    started = await http.post(url, json=initialize, headers=LEGACY_HEADERS)
    assert started.status_code == 200, started.text
    headers = {**LEGACY_HEADERS, "Mcp-Session-Id": started.headers["mcp-session-id"]}
    if version != "2025-03-26":  # the header came with 2025-06-18
        headers["MCP-Protocol-Version"] = version
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, json=initialized, headers=headers)).status_code == 202
    return headers


async def session_counting_cancellations(
    http: httpx2.AsyncClient, url: str
) -> tuple[dict[str, str], Cancellations, int]:
    """A session-era session, its count of upstream cancellations, and that count now."""
    headers = await open_session(http, url)
    counted = Cancellations(http, url, headers)
    return headers, counted, await counted.count()


def legacy_sleep(ident: int, seconds: float) -> dict[str, Any]:
    """A session-era tools/call of the notes server's `sleep`."""
    params = {"name": "sleep", "arguments": {"seconds": seconds}}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


async def test_closing_the_connection_of_a_plain_json_call_cancels_it_upstream(notes_proxy: Proxy) -> None:
    """A plain tools/call answered as JSON is sent upstream from the request's own task; a client
    that goes away before its reply still has it cancelled upstream, and others go on."""
    url = notes_proxy.url
    body = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 30}}, ident=7)
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            counted = Cancellations(http, url)
            before = await counted.count()
            async with httpx2.AsyncClient(timeout=paced(20)) as leaving:
                with anyio.move_on_after(paced(0.5)):  # long enough for the call to reach the upstream
                    await leaving.post(url, json=body, headers=modern_headers("tools/call", "sleep"))
                    raise AssertionError("a 30 s sleep answered at once")
            await counted.rise_to(before + 1)


async def test_a_session_era_plain_call_is_cancelled_by_its_clients_notification(notes_proxy: Proxy) -> None:
    url = notes_proxy.url
    with deadline(30):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            headers, counted, before = await session_counting_cancellations(http, url)
            sleep = legacy_sleep(3, 30)
            replies: list[httpx2.Response] = []

            async def call() -> None:
                replies.append(await http.post(url, json=sleep, headers=headers))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.sleep(paced(0.5))  # long enough for the call to reach the upstream
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
                assert (await http.post(url, json=cancel, headers=headers)).status_code == 202
            assert replies[0].status_code == 200
            assert replies[0].json()["error"]["message"] == "the request was cancelled"
            await counted.rise_to(before + 1)


# -- session-era rules --------------------------------------------------------------------------------


async def test_session_ids_are_required_and_checked(notes_proxy: Proxy) -> None:
    url = notes_proxy.url
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        missing = await http.post(url, json=listing, headers=LEGACY_HEADERS)
        assert missing.status_code == 400
        unknown = await http.post(url, json=listing, headers={**LEGACY_HEADERS, "Mcp-Session-Id": "nope"})
        assert unknown.status_code == 404
        assert (await http.get(url, headers={"Mcp-Session-Id": "nope"})).status_code == 404
        assert (await http.get(url)).status_code == 400

        started = await http.post(url, json=INITIALIZE, headers=LEGACY_HEADERS)
        assert started.status_code == 200, started.text
        session_id = started.headers["mcp-session-id"]
        assert len(session_id) >= 32 and all(0x21 <= ord(c) <= 0x7E for c in session_id)
        headers = {**LEGACY_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers=headers)).status_code == 202
        stray_reply = {"jsonrpc": "2.0", "id": 99, "result": {}}
        assert (await http.post(url, json=stray_reply, headers=headers)).status_code == 202
        listed = await http.post(url, json=listing, headers=headers)
        assert any(tool["name"] == "add" for tool in listed.json()["result"]["tools"])
        # In the session era a 404 means "session gone": an unknown method is an ordinary error reply.
        unknown = await http.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "no/such"}, headers=headers)
        assert unknown.status_code == 200
        assert unknown.json()["error"]["code"] == -32601

        ended = await http.delete(url, headers=headers)
        assert ended.status_code == 200
        after = await http.post(url, json=listing, headers=headers)
        assert after.status_code == 404
        assert (await http.delete(url, headers=headers)).status_code == 404


async def test_idle_sessions_expire() -> None:
    # 0.5 s, paced: a loaded machine's client may take that long between its first two requests.
    proxy = start(notes_command(), "--session-idle-timeout", f"{paced(0.5):g}")
    try:
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            with deadline(30):
                started = await http.post(proxy.url, json=INITIALIZE, headers=LEGACY_HEADERS)
                headers = {**LEGACY_HEADERS, "Mcp-Session-Id": started.headers["mcp-session-id"]}
                listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                assert (await http.post(proxy.url, json=listing, headers=headers)).status_code == 200
                await anyio.sleep(paced(1.5))
                assert (await http.post(proxy.url, json=listing, headers=headers)).status_code == 404
    finally:
        proxy.stop()


async def test_stateless_mode_serves_session_era_clients_without_sessions() -> None:
    proxy = start(notes_command(), "--stateless")
    try:
        with deadline(40):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                started = await http.post(proxy.url, json=INITIALIZE, headers=LEGACY_HEADERS)
                assert started.status_code == 200
                assert "mcp-session-id" not in started.headers
                assert (await http.get(proxy.url)).status_code == 405
            async with sdk_client(proxy.url, "legacy") as legacy, sdk_client(proxy.url, "auto") as modern:
                assert (await legacy.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
                assert (await modern.call_tool("add", {"a": 2, "b": 2})).structured_content == {"result": 4}
                # No session, no way to ask a session-era client anything: the error says so.
                with pytest.raises(MCPError) as refused:
                    await legacy.call_tool("summarise", {"topic": "tides"})
                assert "--stateless" in str(refused.value)
                # A 2026-07-28 client gets the question as input_required and answers it.
                sampled = await modern.call_tool("summarise", {"topic": "tides"})
                assert "sampled: Summarise tides" in sampled.content[0].text  # type: ignore[union-attr]
    finally:
        proxy.stop()


async def test_a_stateless_client_cannot_cancel_another_clients_call_that_has_its_id() -> None:
    """Stateless session-era clients all share one Router and number their requests themselves:
    one client's notifications/cancelled naming id 7 must not cancel another client's call 7,
    and a second client's call 7 meanwhile is answered as its own."""
    proxy = start(notes_command(), "--stateless")
    sleep = {"name": "sleep", "arguments": {"seconds": 1.0}}
    add = {"name": "add", "arguments": {"a": 40, "b": 2}}
    try:
        with deadline(40):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                assert (await http.post(proxy.url, json=INITIALIZE, headers=LEGACY_HEADERS)).status_code == 200
                others: list[httpx2.Response] = []

                async def another_client() -> None:
                    await anyio.sleep(0.3)
                    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
                    others.append(await http.post(proxy.url, json=cancel, headers=LEGACY_HEADERS))
                    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": add}
                    others.append(await http.post(proxy.url, json=call, headers=LEGACY_HEADERS))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(another_client)
                    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": sleep}
                    slept = await http.post(proxy.url, json=call, headers=LEGACY_HEADERS)
        body = slept.json()
        assert body["id"] == 7 and "error" not in body and not body["result"].get("isError"), body
        assert others[0].status_code == 202
        assert others[1].json()["result"]["structuredContent"] == {"result": 42}
    finally:
        proxy.stop()


# -- hardening ----------------------------------------------------------------------------------------


async def test_body_cap_is_enforced_while_reading() -> None:
    proxy = start(notes_command(), "--max-body-bytes", "2000")
    try:
        big = modern_body("tools/call", {"name": "echo", "arguments": {"text": "x" * 5000}})
        headers = modern_headers("tools/call", "echo")
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            declared = await http.post(proxy.url, json=big, headers=headers)
            assert declared.status_code == 413

            async def chunks() -> Any:  # no Content-Length: the cap is counted as the body arrives
                import json

                data = json.dumps(big).encode()
                for start_at in range(0, len(data), 500):
                    yield data[start_at : start_at + 500]

            streamed = await http.post(proxy.url, content=chunks(), headers=headers)
            assert streamed.status_code == 413
            small = modern_body("tools/call", {"name": "echo", "arguments": {"text": "x"}})
            assert (await http.post(proxy.url, json=small, headers=headers)).status_code == 200
    finally:
        proxy.stop()


async def test_a_set_token_is_required_everywhere_but_healthz() -> None:
    proxy = start(notes_command(), env={"FRUGAL_AUTH_TOKEN": "s3cret-token"})
    try:
        headers = modern_headers("tools/list")
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            missing = await http.post(proxy.url, json=modern_body("tools/list"), headers=headers)
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"].startswith("Bearer")
            wrong = await http.post(
                proxy.url, json=modern_body("tools/list"), headers={**headers, "Authorization": "Bearer nope"}
            )
            assert wrong.status_code == 401
            right = await http.post(
                proxy.url, json=modern_body("tools/list"), headers={**headers, "Authorization": "Bearer s3cret-token"}
            )
            assert right.status_code == 200
            health = await http.get(f"{proxy.base}/healthz")
            assert health.status_code == 200
            assert health.json() == {"status": "ok", "upstreams": {"notes_server": "up"}}
        assert not any("s3cret-token" in line for line in proxy.lines)
    finally:
        proxy.stop()


async def test_dns_rebinding_protection() -> None:
    proxy = start(notes_command(), "--allowed-host", "sidecar", "--allowed-origin", "https://app.example.com")
    try:
        body, headers = modern_body("tools/list"), modern_headers("tools/list")
        async with httpx2.AsyncClient(timeout=paced(20)) as http:

            async def status(**extra: str) -> int:
                return (await http.post(proxy.url, json=body, headers={**headers, **extra})).status_code

            assert await status() == 200
            assert await status(Origin="http://localhost:3000") == 200
            assert await status(Origin="https://app.example.com") == 200
            assert await status(Origin="https://evil.example") == 403
            assert await status(Origin="null") == 403
            assert await status(Host="evil.example") == 403
            assert await status(Host="sidecar:8765") == 200
            assert await status(Host="localhost") == 200
    finally:
        proxy.stop()


async def test_rate_limit_answers_429_with_retry_after() -> None:
    proxy = start(notes_command(), "--rate-limit", "0.01/3")  # one token in 100 s: a slow client still meets the 429
    try:
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            codes = [(await http.get(f"{proxy.base}/healthz")) for _ in range(4)]
        assert [reply.status_code for reply in codes] == [200, 200, 200, 429]
        assert int(codes[-1].headers["retry-after"]) >= 1
    finally:
        proxy.stop()


@pytest.mark.parametrize(("options", "second"), [((), 429), (("--forwarded-allow-ips", "127.0.0.1"), 200)])
async def test_x_forwarded_for_is_believed_only_from_allowed_proxies(options: tuple[str, ...], second: int) -> None:
    """A local process that forges X-Forwarded-For picks no client IP of its own (one bucket,
    the connection's): only a proxy named by --forwarded-allow-ips is believed."""
    proxy = start(notes_command(), "--rate-limit", "0.01/1", *options)
    try:
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            codes = [
                (await http.get(f"{proxy.base}/healthz", headers={"X-Forwarded-For": forged})).status_code
                for forged in ("203.0.113.1", "203.0.113.2")
            ]
        assert codes == [200, second]
    finally:
        proxy.stop()


@pytest.mark.parametrize("bad", ["10.0.0.300", "proxy.example", ","])
def test_forwarded_allow_ips_must_be_addresses_or_networks(bad: str) -> None:
    done = subprocess.run(
        proxy_command(notes_command(), "--http", "127.0.0.1:0", "--forwarded-allow-ips", bad),
        capture_output=True,
        timeout=paced(30),
        check=False,
        text=True,
    )
    assert done.returncode == 2
    assert "--forwarded-allow-ips" in done.stderr and "e.g. 10.0.0.5" in done.stderr


def test_a_non_loopback_bind_is_refused_without_a_token(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    upstream = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    # 192.0.2.1 (TEST-NET-1) is on no local interface: were the check after the bind, the error would differ.
    env = {key: value for key, value in os.environ.items() if key != "FRUGAL_AUTH_TOKEN"}
    done = subprocess.run(
        proxy_command(upstream, "--http", "192.0.2.1:8765"),
        capture_output=True,
        timeout=paced(30),
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert b"refusing to listen on 192.0.2.1 without authentication" in done.stderr
    assert b"FRUGAL_AUTH_TOKEN" in done.stderr
    assert not marker.exists()


def test_a_bad_address_is_refused() -> None:
    done = subprocess.run(
        proxy_command(notes_command(), "--http", "localhost:notaport"),
        capture_output=True,
        timeout=paced(30),
        check=False,
    )
    assert done.returncode == 2
    assert b"--http wants HOST:PORT" in done.stderr


async def test_shutdown_drains_calls_in_flight() -> None:
    proxy = start(notes_command())
    try:
        body = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 1}})
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            with deadline(30):
                async with anyio.create_task_group() as tg:
                    replies: list[httpx2.Response] = []

                    async def call() -> None:
                        replies.append(
                            await http.post(proxy.url, json=body, headers=modern_headers("tools/call", "sleep"))
                        )

                    tg.start_soon(call)
                    await anyio.sleep(paced(0.4))  # the call is in flight when the signal comes
                    proxy.process.send_signal(signal.SIGTERM)
        assert replies[0].status_code == 200
        assert "result" in replies[0].json()
        assert await anyio.to_thread.run_sync(proxy.process.wait, 15) == 0
    finally:
        proxy.stop()


# A stdio upstream whose stderr never stops while it starts and serves: the notes server beside a
# thread that writes a line every fifth of a millisecond for a few seconds.
CHATTY = [
    sys.executable,
    "-c",
    "import runpy, sys, threading, time\n"
    "def chatter():\n"
    "    end = time.monotonic() + 4\n"
    "    while time.monotonic() < end:\n"
    "        sys.stderr.write('chatter chatter chatter\\n'); sys.stderr.flush(); time.sleep(0.0002)\n"
    "threading.Thread(target=chatter, daemon=True).start()\n"
    f"sys.argv = [{str(NOTES_SERVER)!r}]\n"
    f"runpy.run_path({str(NOTES_SERVER)!r}, run_name='__main__')\n",
]


def test_the_listening_line_stays_whole_beside_an_upstream_that_writes_to_stderr() -> None:
    """The upstream's stderr is copied to the proxy's from a worker thread; the listening line
    is one write, so no copied line lands inside it, and each copied line stays whole. When it
    was print()'s two writes, about one start in eight under load broke it (the window is
    narrow: this catches a return to that now and then; tests/proxy/test_logs.py checks the one
    write every time)."""
    for _ in range(3):
        proxy = start(CHATTY)  # fails unless the line is exactly the URL
        proxy.stop()
        assert proxy.url.endswith("/mcp")
        copied = [line for line in proxy.lines if "chatter" in line]
        assert copied and set(copied) == {"[notes_server] chatter chatter chatter"}, copied[:3]


def test_a_signal_as_soon_as_the_port_is_announced_stops_it_cleanly() -> None:
    """The listening line promises a clean stop on SIGTERM from then on (it used to come before
    the handler was in place: a signal sent at once killed the proxy undrained, about one in
    three times, with status -15). A few tries, since the window was one event-loop turn."""
    for _ in range(4):
        proxy = start(notes_command())
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.stop() == 0


async def test_serve_http_with_a_config(tmp_path: Path) -> None:
    config = tmp_path / "frugal.toml"
    command = ", ".join(f'"{part}"' for part in notes_command())
    config.write_text(f"[upstreams.notes]\ncommand = [{command}]\n\n[upstreams.other]\ncommand = [{command}]\n")
    proxy = Proxy([sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"])
    try:
        url = proxy.wait_listening()
        with deadline(40):
            async with sdk_client(url, "auto") as modern, sdk_client(url, "legacy") as legacy:
                for client in (modern, legacy):
                    # On a loaded machine an upstream can outlast the 3 s discover probe: until
                    # its late answer arrives the proxy takes it for session-era, its listing
                    # fails and it is left out of that answer (logged). Ask until both are there.
                    for _ in range(int(paced(5) / 0.25)):
                        names = {tool.name for tool in (await client.list_tools()).tools}
                        if {"notes__add", "other__add"} <= names:
                            break
                        await anyio.sleep(0.25)
                    assert {"notes__add", "other__add"} <= names, "\n".join(proxy.lines)
                    result = await client.call_tool("other__add", {"a": 40, "b": 2})
                    assert result.structured_content == {"result": 42}
    finally:
        assert proxy.stop() == 0


def test_an_upstream_that_cannot_start_exits_2_before_listening() -> None:
    proxy = Proxy(proxy_command(["/nonexistent/frugal-test-binary"], "--http", "127.0.0.1:0"))
    deadline = time.monotonic() + 30
    while proxy.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proxy.stop() == 2
    assert not proxy.url
    assert any("the upstream did not start" in line for line in proxy.lines)


async def test_a_token_guarded_non_loopback_bind_accepts_its_service_name_as_host() -> None:
    """The Docker sidecar, reached as http://frugal-proxy:8765/mcp on a compose network: with a
    bearer token required, any Host passes on a non-loopback bind; a loopback bind stays strict."""
    token = {"FRUGAL_AUTH_TOKEN": "sidecar-token"}
    wide = Proxy(proxy_command(notes_command(), "--http", "0.0.0.0:0"), token)
    narrow = Proxy(proxy_command(notes_command(), "--http", "127.0.0.1:0"), token)
    try:
        wide_port = wide.wait_listening().rsplit(":", 1)[1].split("/")[0]
        narrow_url = narrow.wait_listening()
        headers = {"Host": "frugal-proxy:8765", "Authorization": "Bearer sidecar-token"}
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            served = await http.get(f"http://127.0.0.1:{wide_port}/healthz", headers=headers)
            listed = await http.post(
                f"http://127.0.0.1:{wide_port}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}},
                headers={**headers, **modern_headers("tools/list")},
            )
            browser = await http.get(
                f"http://127.0.0.1:{wide_port}/healthz", headers={**headers, "Origin": "https://evil.example"}
            )
            strict = await http.get(narrow_url.rsplit("/", 1)[0] + "/healthz", headers=headers)
        assert served.status_code == 200 and listed.status_code == 200, listed.text
        assert browser.status_code == 403 and browser.json()["error"] == "origin_not_allowed"
        assert strict.status_code == 403 and strict.json()["error"] == "host_not_allowed"
    finally:
        wide.stop()
        narrow.stop()
