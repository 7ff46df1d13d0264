"""Protocol rules a careless or hostile client runs into, over stdio and HTTP, against real
upstreams: a refused request changes nothing later ones carry, every call has a deadline, and
each bad value gets its own -32602 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.conftest import notes_command
from tests.e2e.test_bad_input import call, proxied, text
from tests.e2e.test_http_downstream import INITIALIZE, LEGACY_HEADERS, META, Proxy, modern_body, modern_headers
from tests.e2e.test_http_downstream import start as start_http
from tests.rawclient import MODERN_META

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
    opened = httpx2.post(url, json=INITIALIZE, headers=LEGACY_HEADERS, timeout=10)
    session = opened.headers["mcp-session-id"]
    headers = {**LEGACY_HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    set_level = {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "nonsense"}}
    refused = httpx2.post(url, json=set_level, headers=headers, timeout=10)
    assert names_every_level(refused.json())
    add = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}}
    added = httpx2.post(url, json=add, headers=headers, timeout=10).json()
    assert added["result"]["content"][0]["text"] == "5"


def test_an_invalid_log_level_in_a_modern_request_over_http_is_refused(notes_http: Proxy) -> None:
    meta = {**META, "io.modelcontextprotocol/logLevel": "nonsense"}
    body = modern_body("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}, meta=meta)
    refused = httpx2.post(notes_http.url, json=body, headers=modern_headers("tools/call", "add"), timeout=10)
    assert names_every_level(refused.json())
    body = modern_body("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}})
    added = httpx2.post(notes_http.url, json=body, headers=modern_headers("tools/call", "add"), timeout=10).json()
    assert added["result"]["content"][0]["text"] == "5"
