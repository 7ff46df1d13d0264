"""Protocol rules a careless or hostile client runs into, over stdio and HTTP, against real
upstreams: a refused request changes nothing later ones carry, every call has a deadline, and
each bad value gets its own -32602 naming the field."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.conftest import everything_command, notes_command
from tests.e2e.test_bad_input import FAULTY, call, proxied, running, text
from tests.e2e.test_http_downstream import (
    INITIALIZE,
    LEGACY_HEADERS,
    META,
    Proxy,
    modern_body,
    modern_headers,
    sdk_client,
)
from tests.e2e.test_http_downstream import start as start_http
from tests.pace import deadline, paced
from tests.rawclient import MODERN_META, RawClient

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@pytest.fixture(scope="module")
def notes_http() -> Iterator[Proxy]:
    proxy = start_http(notes_command())
    yield proxy
    proxy.stop()


def names_every_level(reply: dict[str, Any]) -> bool:
    message = reply["error"]["message"]
    return reply["error"]["code"] == -32602 and all(level in message for level in LEVELS)


# -- logging levels --------------------------------------------------------------------------------------


async def test_an_invalid_set_level_over_stdio_is_refused_and_changes_nothing() -> None:
    async with proxied(upstream=notes_command()) as client:
        await client.initialize()
        refused = await client.request(1, "logging/setLevel", {"level": "nonsense"})
        assert names_every_level(refused) and "'nonsense'" in refused["error"]["message"]
        assert names_every_level(await client.request(2, "logging/setLevel", {}))
        assert text(await call(client, 3, "add", {"a": 2, "b": 3})) == "5"
        assert (await client.request(4, "logging/setLevel", {"level": "debug"}))["result"] == {}
        assert text(await call(client, 5, "add", {"a": 1, "b": 1})) == "2"
    assert "client request refused" in client.stderr_text()


async def test_an_invalid_log_level_in_a_modern_request_over_stdio_is_refused() -> None:
    async with proxied(upstream=notes_command()) as client:
        meta = {**MODERN_META, "io.modelcontextprotocol/logLevel": "nonsense"}
        refused = await client.request(1, "tools/list", {"_meta": meta})
        assert names_every_level(refused)
        meta = {**MODERN_META, "io.modelcontextprotocol/logLevel": "info"}
        listed = await client.request(2, "tools/list", {"_meta": meta})
        assert "result" in listed


def test_an_invalid_set_level_over_http_is_refused_and_changes_nothing(notes_http: Proxy) -> None:
    url = notes_http.url
    opened = httpx2.post(url, json=INITIALIZE, headers=LEGACY_HEADERS, timeout=paced(10))
    session = opened.headers["mcp-session-id"]
    headers = {**LEGACY_HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    set_level = {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "nonsense"}}
    refused = httpx2.post(url, json=set_level, headers=headers, timeout=paced(10))
    assert names_every_level(refused.json())
    add = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    added = httpx2.post(url, json=add, headers=headers, timeout=paced(10)).json()
    assert added["result"]["content"][0]["text"] == "5"


def test_an_invalid_log_level_in_a_modern_request_over_http_is_refused(notes_http: Proxy) -> None:
    meta = {**META, "io.modelcontextprotocol/logLevel": "nonsense"}
    body = modern_body("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}, meta=meta)
    refused = httpx2.post(notes_http.url, json=body, headers=modern_headers("tools/call", "add"), timeout=paced(10))
    assert names_every_level(refused.json())
    body = modern_body("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    added = httpx2.post(
        notes_http.url, json=body, headers=modern_headers("tools/call", "add"), timeout=paced(10)
    ).json()
    assert added["result"]["content"][0]["text"] == "5"


# -- deadlines -----------------------------------------------------------------------------------------


@asynccontextmanager
async def stopped(pid: int) -> AsyncIterator[None]:
    """The process stopped (SIGSTOP) for the block, continued (SIGCONT) whatever happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def call_deadline() -> float:
    """The upstream call deadline these tests set: 1 s, paced (a loaded machine's answers to the
    calls that must go through take longer), to a tenth of a second as the config writes it."""
    return round(paced(1), 1)


def names_the_deadline(message: str) -> bool:
    seconds = f"{call_deadline():g}"
    return all(
        part in message
        for part in ("'faulty'", f"within {seconds} s", "upstreams.faulty.timeout", "limits.call_timeout")
    )


async def test_every_request_over_stdio_to_a_stopped_upstream_ends_at_its_deadline(tmp_path: Path) -> None:
    config = tmp_path / "frugal.toml"
    config.write_text(f'[upstreams.faulty]\ncommand = {json.dumps(FAULTY)}\ntimeout = "{call_deadline():g}s"\n')
    async with running([sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config)]) as client:
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        async with stopped(pid):
            with deadline(10):  # 1 s each (paced); without a deadline these wait forever
                listed = await client.request(2, "tools/list", {}, wait=10)
                prompts = await client.request(3, "prompts/list", {}, wait=10)
                called = await call(client, 4, "echo", {"text": "anyone?"})
            assert listed["error"]["code"] == -32603 and names_the_deadline(listed["error"]["message"])
            assert "tools/list" in listed["error"]["message"]
            assert "error" in prompts and names_the_deadline(prompts["error"]["message"])
            assert called["result"]["isError"] is True and names_the_deadline(text(called))
        assert text(await call(client, 5, "echo", {"text": "back"})) == "back"
    assert "upstream request timed out" in client.stderr_text()


async def test_the_wrap_form_over_stdio_applies_the_config_files_call_timeout(tmp_path: Path) -> None:
    config = tmp_path / "frugal.toml"
    config.write_text(f'[limits]\ncall_timeout = "{call_deadline():g}s"\n')
    async with proxied("--config", str(config), "--name", "faulty") as client:
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        async with stopped(pid):
            with deadline(10):
                called = await call(client, 2, "echo", {"text": "anyone?"})
                listed = await client.request(3, "tools/list", {}, wait=10)
            assert called["result"]["isError"] is True and names_the_deadline(text(called))
            assert names_the_deadline(listed["error"]["message"])
        assert text(await call(client, 4, "echo", {"text": "back"})) == "back"


async def test_healthz_reports_a_stopped_upstream_unresponsive(tmp_path: Path) -> None:
    config = tmp_path / "frugal.toml"
    config.write_text(f"[upstreams.faulty]\ncommand = {json.dumps(FAULTY)}\n")
    proxy = Proxy([sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"])
    try:
        url = proxy.wait_listening()
        body = modern_body("tools/call", {"name": "pid", "arguments": {}})
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            started = await http.post(url, json=body, headers=modern_headers("tools/call", "pid"))
            pid = int(started.json()["result"]["content"][0]["text"])
            assert (await http.get(f"{proxy.base}/healthz")).json()["upstreams"] == {"faulty": "up"}
            async with stopped(pid):
                with deadline(10):
                    health = await http.get(f"{proxy.base}/healthz")
                assert health.status_code == 200 and health.json()["upstreams"] == {"faulty": "unresponsive"}
            assert (await http.get(f"{proxy.base}/healthz")).json()["upstreams"] == {"faulty": "up"}
    finally:
        proxy.stop()


# -- progress tokens -----------------------------------------------------------------------------------

BAD_TOKENS = {"1e999": b"1e999", "-1e999": b"-1e999", "5000 digits": b"9" * 5000, "true": b"true"}
BAD_TOKENS |= {"an object": b"{}", "an array": b"[1]", "a fraction": b"1.5", "null": b"null"}


@pytest.mark.parametrize("token", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_bad_progress_token_over_stdio_gets_invalid_params_naming_it(token: bytes, era: str) -> None:
    meta = json.dumps(MODERN_META if era == "modern" else {})[:-1].encode()
    meta += (b"," if era == "modern" else b"") + b'"progressToken":' + token + b"}"
    async with proxied(upstream=notes_command()) as client:
        if era == "legacy":
            await client.initialize()
        await client.send_line(
            b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2},"_meta":'
            + meta
            + b"}}"
        )
        reply = await client.receive(wait=10)
        assert reply["id"] == 5 and reply["error"]["code"] == -32602, reply
        assert "params._meta.progressToken" in reply["error"]["message"]
        added = await client.request(
            6,
            "tools/call",
            {"name": "add", "arguments": {"a": 2, "b": 3}, **({"_meta": MODERN_META} if era == "modern" else {})},
        )
        assert text(added) == "5"


@pytest.mark.parametrize("token", [b"1e999", b"true"])
def test_a_bad_progress_token_over_http_gets_invalid_params_naming_it(notes_http: Proxy, token: bytes) -> None:
    meta = json.dumps(META)[:-1].encode() + b',"progressToken":' + token + b"}"
    body = b'{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta":' + meta + b"}}"
    reply = httpx2.post(notes_http.url, content=body, headers=modern_headers("tools/list"), timeout=paced(10))
    error = json.loads(reply.text.split("data: ", 1)[1]) if reply.text.startswith(("event", "id")) else reply.json()
    assert error["error"]["code"] == -32602 and "params._meta.progressToken" in error["error"]["message"]


# -- 2025-03-26 batches --------------------------------------------------------------------------------

ADD = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}'
BAD_BATCH = (
    b"["
    + b",".join(
        [
            ADD,
            b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
            b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
            b'{"id":4,"method":"ping"}',
            b"5",
            b'{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":{"progressToken":1e999}}}',
        ]
    )
    + b"]"
)


def answered_per_element(replies: Any) -> None:
    assert isinstance(replies, list) and len(replies) == 6, replies
    by_id = {reply["id"]: reply for reply in replies if reply["id"] is not None}
    assert by_id[1]["result"]["content"][0]["text"] == "5"
    assert by_id[3]["result"] == {}
    assert by_id[4]["error"]["code"] == -32600 and "jsonrpc" in by_id[4]["error"]["message"]
    assert by_id[6]["error"]["code"] == -32602 and "progressToken" in by_id[6]["error"]["message"]
    unnamed = [reply["error"] for reply in replies if reply["id"] is None]
    assert sorted(error["code"] for error in unnamed) == [-32600, -32600]
    assert any(error["message"].startswith("id: a number is out of range") for error in unnamed)


def initialize_as(version: str) -> dict[str, Any]:
    return {**INITIALIZE, "params": {**INITIALIZE["params"], "protocolVersion": version}}


async def test_a_2025_03_26_batch_over_stdio_is_answered_element_by_element() -> None:
    async with proxied(upstream=notes_command()) as client:
        await client.send(initialize_as("2025-03-26"))
        assert (await client.receive())["result"]["protocolVersion"] == "2025-03-26"
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await client.send_line(BAD_BATCH)
        answered_per_element(await client.receive())
    assert "client sent a bad batch element" in client.stderr_text()


async def test_a_later_revisions_bad_batch_over_stdio_is_still_refused_whole() -> None:
    async with proxied(upstream=notes_command()) as client:
        await client.initialize()  # 2025-11-25
        await client.send_line(BAD_BATCH)
        refused = await client.receive()
        assert isinstance(refused, dict) and refused["id"] is None and refused["error"]["code"] == -32600


def test_a_2025_03_26_batch_over_http_is_answered_element_by_element(notes_http: Proxy) -> None:
    opened = httpx2.post(notes_http.url, json=initialize_as("2025-03-26"), headers=LEGACY_HEADERS, timeout=paced(10))
    session = {**LEGACY_HEADERS, "Mcp-Session-Id": opened.headers["mcp-session-id"]}  # 2025-03-26 sent no version
    reply = httpx2.post(notes_http.url, content=BAD_BATCH, headers=session, timeout=paced(10))
    assert reply.status_code == 200
    answered_per_element(reply.json())
    later = httpx2.post(notes_http.url, json=INITIALIZE, headers=LEGACY_HEADERS, timeout=paced(10))
    headers = {
        **LEGACY_HEADERS,
        "Mcp-Session-Id": later.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    refused = httpx2.post(notes_http.url, content=BAD_BATCH, headers=headers, timeout=paced(10))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600


# -- cancellation ----------------------------------------------------------------------------------------


async def test_a_cancelled_request_that_never_reached_the_upstream_is_not_cancelled_there() -> None:
    async with proxied() as client:  # the wrap form in front of the faulty server, over stdio
        await client.initialize()
        pid = int(text(await call(client, 1, "pid")))
        async with stopped(pid):
            # A stopped upstream stops reading: 4 MiB fill its stdin pipe and hold the writer, so
            # the next request waits for its turn, and is cancelled before it is written.
            big = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            await client.send({**big, "params": {"name": "echo", "arguments": {"text": "x" * (4 << 20)}}})
            await client.send({**big, "id": 3, "params": {"name": "echo", "arguments": {"text": "never sent"}}})
            await anyio.sleep(0.5)
            await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}})
            await anyio.sleep(0.5)
        assert (await client.receive(wait=20))["id"] == 2
        assert (await client.request(6, "ping"))["result"] == {}  # answered by the proxy itself
        for answered in (6, 999, "never-seen"):
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": answered}}
            await client.send(cancel)
        assert text(await call(client, 4, "cancellations")) == "[]"
        assert text(await call(client, 5, "echo", {"text": "fine"})) == "fine"


async def cancellations_over_http(http: httpx2.AsyncClient, url: str) -> int:
    body = modern_body("tools/call", {"name": "cancellations", "arguments": {}})
    reply = await http.post(url, json=body, headers=modern_headers("tools/call", "cancellations"))
    return int(reply.json()["result"]["structuredContent"]["result"])


async def test_a_modern_client_that_disconnects_from_a_plain_json_call_has_it_cancelled_upstream(
    notes_http: Proxy,
) -> None:
    url = notes_http.url
    body = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 30}}, ident=7)  # no progressToken
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        before = await cancellations_over_http(http, url)
        with pytest.raises(httpx2.ReadTimeout):  # the client gives up after 1 s (paced) and drops the connection
            await http.post(url, json=body, headers=modern_headers("tools/call", "sleep"), timeout=paced(1))
        with deadline(5):  # the upstream hears of it within a second or so; 5 s: hang detection
            while await cancellations_over_http(http, url) == before:  # noqa: ASYNC110 - another process's count
                await anyio.sleep(0.1)


async def test_an_sdk_client_that_cancels_a_call_over_http_has_it_cancelled_upstream(notes_http: Proxy) -> None:
    url = notes_http.url
    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        before = await cancellations_over_http(http, url)
        async with sdk_client(url, "auto") as client:
            with anyio.move_on_after(paced(1)):  # the SDK aborts the call's POST: 2026-07-28's cancellation
                await client.call_tool("sleep", {"seconds": 30})
            with deadline(5):
                while await cancellations_over_http(http, url) == before:  # noqa: ASYNC110 - another process's count
                    await anyio.sleep(0.1)


# -- a failing elicitation handler ---------------------------------------------------------------------

HANDLER_FAILED = {"code": -32603, "message": "the elicitation handler failed: no terminal"}
ELICIT = {"name": "trigger-elicitation-request", "arguments": {}}


async def test_a_modern_clients_failing_elicitation_handler_fails_the_upstream_tool_as_directly() -> None:
    capabilities = {"elicitation": {"form": {}}}
    async with anyio.create_task_group() as tg:  # server-everything directly, a session-era client
        direct = await RawClient.start(tg, everything_command())
        try:
            params = {**initialize_as("2025-11-25")["params"], "capabilities": capabilities}
            await direct.send({**INITIALIZE, "params": params})
            await direct.receive(wait=20)
            await direct.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await direct.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ELICIT})
            asked = await direct.receive(wait=20)
            while "id" not in asked:  # its list_changed notifications come first
                asked = await direct.receive(wait=20)
            assert asked["method"] == "elicitation/create"
            await direct.send({"jsonrpc": "2.0", "id": asked["id"], "error": HANDLER_FAILED})
            directly = (await direct.receive(wait=20))["result"]
        finally:
            direct.process.kill()
            tg.cancel_scope.cancel()
    assert directly["isError"] is True and "no terminal" in directly["content"][0]["text"]
    meta = {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": capabilities}
    async with proxied(upstream=everything_command()) as client:
        first = await client.request(3, "tools/call", {**ELICIT, "_meta": meta}, wait=30)
        (key,) = first["result"]["inputRequests"]
        retry = {**ELICIT, "_meta": meta, "requestState": first["result"]["requestState"]}
        retry["inputResponses"] = {key: HANDLER_FAILED}
        proxied_result = (await client.request(4, "tools/call", retry, wait=30))["result"]
    assert proxied_result["isError"] is True
    assert proxied_result["content"] == directly["content"]
