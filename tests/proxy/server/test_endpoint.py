"""The /mcp endpoint in-process: the ASGI app (server.app.build_app, the guard in front) called
through httpx2's ASGITransport, a Router over fake upstreams behind it. 2026-07-28 requests and
their header rules, a request's SSE stream, the request timeout, batches, /healthz, and the
session era with sessions of their own."""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.router.router import Router
from frugal_proxy.server.app import build_app
from frugal_proxy.server.endpoint import Endpoint, HttpSettings
from frugal_proxy.server.metrics import Metrics
from frugal_proxy.server.sessions import HttpSessions, UpstreamSet
from frugal_proxy.server.streams import PlainReply
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import notes_command
from tests.fake_peers import FakeCall, FakeClient, FakeUpstream, tool
from tests.pace import deadline
from tests.proxy.server.test_connections import serving

pytestmark = pytest.mark.anyio

MODERN = eras.LATEST_MODERN
META = {eras.META_VERSION: MODERN, eras.META_CAPABILITIES: {}}
NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


@asynccontextmanager
async def endpoint(
    upstreams: list[UpstreamBase], make: Callable[[], list[UpstreamBase]] | None = None, **settings: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """The app over a shared Router (and, given `make`, session-era sessions), and a client for it."""
    http = HttpSettings(stateless=make is None, **settings)
    with deadline(10):
        async with anyio.create_task_group() as tg:
            shared = Router(upstreams, FakeClient().peer, tg)
            sessions = None
            if make is not None:
                sessions = HttpSessions(tg, UpstreamSet(make), idle_timeout=60, max_sessions=http.max_sessions)
            app = build_app(Endpoint(shared, sessions, http), http, Metrics())
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
                yield client
            if sessions is not None:
                await sessions.end_all()
            tg.cancel_scope.cancel()


def message(ident: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}


async def modern(
    client: httpx2.AsyncClient,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    ident: Any = 1,
    headers: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> httpx2.Response:
    """A 2026-07-28 POST with the headers a conforming client sends (`headers` overrides them)."""
    params = {**(params or {}), "_meta": meta if meta is not None else META}
    sent = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method in NAMED:
        sent["Mcp-Name"] = str(params.get(NAMED[method], ""))
    sent.update(headers or {})
    return await client.post("/mcp", json=message(ident, method, params), headers=sent)


async def legacy(
    client: httpx2.AsyncClient, body: Any, session: str | None = None, version: str = "2025-06-18"
) -> httpx2.Response:
    headers = {"MCP-Protocol-Version": version}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return await client.post("/mcp", json=body, headers=headers)


def events(response: httpx2.Response) -> list[Any]:
    return [json.loads(line[len("data: ") :]) for line in response.text.splitlines() if line.startswith("data: ")]


# -- 2026-07-28 --------------------------------------------------------------------------------


async def test_a_modern_call_is_answered_as_json_with_the_clients_id() -> None:
    upstream = FakeUpstream()
    async with endpoint([upstream]) as client:
        response = await modern(client, "tools/call", {"name": "echo", "arguments": {"x": 1}}, ident="mine")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    reply = response.json()
    assert reply["id"] == "mine" and reply["result"]["content"][0]["text"] == 'echo {"x":1}'
    assert upstream.last("tools/call").params["name"] == "echo"


async def test_a_plain_calls_objects_are_freed_as_it_ends_without_the_garbage_collector() -> None:
    """Served by uvicorn with the proxy's protocol, a plain call's response and the call (each
    held the other) and the request's cycle (its scope held a hook holding it) leave no reference
    cycle behind: with the collector off, none of a finished call is still alive (but the
    connection's last request cycle and the one before it), so none waits for a collection,
    which then walked every object of the call (tens of µs a call)."""
    upstream = UpstreamConnection(notes_command(), name="notes")
    gc.collect()
    earlier = {id(o) for o in gc.get_objects() if isinstance(o, PlainReply | RequestResponseCycle)}
    gc.disable()
    try:
        with deadline(20):
            async with upstream, anyio.create_task_group() as tg:
                http = HttpSettings(stateless=True)
                app = build_app(Endpoint(Router([upstream], FakeClient().peer, tg), None, http), http, Metrics())
                async with serving(app, access_log=False) as port:
                    async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                        for ident in range(10):
                            params = {"name": "add", "arguments": {"a": ident, "b": 3}}
                            response = await modern(client, "tools/call", params, ident=ident)
                            assert response.json()["result"]["structuredContent"] == {"result": ident + 3}
                        made = [o for o in gc.get_objects() if id(o) not in earlier]
                await upstream.shutdown()
                tg.cancel_scope.cancel()
    finally:
        gc.enable()
    assert [o for o in made if isinstance(o, PlainReply)] == []
    assert len([o for o in made if isinstance(o, RequestResponseCycle)]) <= 2


@pytest.mark.parametrize(
    ("headers", "meta", "status", "code"),
    [
        ({"Mcp-Method": "tools/list"}, None, 400, jsonrpc.HEADER_MISMATCH),
        ({"Mcp-Name": "other"}, None, 400, jsonrpc.HEADER_MISMATCH),
        ({"MCP-Protocol-Version": "2099-01-01"}, None, 400, jsonrpc.HEADER_MISMATCH),
        ({}, {eras.META_VERSION: MODERN}, 400, jsonrpc.INVALID_PARAMS),
        (
            {"MCP-Protocol-Version": "2099-01-01"},
            {**META, eras.META_VERSION: "2099-01-01"},
            400,
            jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
        ),
    ],
)
async def test_headers_and_meta_that_disagree_are_refused_before_any_upstream(
    headers: dict[str, str], meta: dict[str, Any] | None, status: int, code: int
) -> None:
    upstream = FakeUpstream()
    async with endpoint([upstream]) as client:
        response = await modern(client, "tools/call", {"name": "echo"}, ident=4, headers=headers, meta=meta)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code and response.json()["id"] == 4
    assert "tools/call" not in upstream.methods()


async def test_what_the_modern_revision_removed_or_never_posts_is_refused() -> None:
    async with endpoint([FakeUpstream()]) as client:
        handshake = await modern(client, "initialize")
        unsupported = await modern(client, "prompts/list")  # the upstream's -32601 gets its HTTP status
        note = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/x", "params": {"_meta": META}},
            headers={"MCP-Protocol-Version": MODERN},
        )
        answer = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "result": {}}, headers={"MCP-Protocol-Version": MODERN}
        )
        get = await client.get("/mcp", headers={"MCP-Protocol-Version": MODERN})
    assert handshake.status_code == 404 and handshake.json()["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
    assert unsupported.status_code == 404
    assert note.status_code == 202
    assert answer.status_code == 400
    assert get.status_code == 405 and get.headers["allow"] == "POST"


async def test_a_call_that_asks_for_progress_is_answered_on_its_own_event_stream() -> None:
    upstream = FakeUpstream()

    async def counts(call: FakeCall) -> Any:
        await call.progress(1)
        return {"content": [], "resultType": "complete"}

    upstream.handlers["tools/call"] = counts
    async with endpoint([upstream]) as client:
        response = await modern(client, "tools/call", {"name": "count"}, ident=9, meta={**META, "progressToken": "t"})
    assert response.headers["content-type"].startswith("text/event-stream")
    progress, reply = events(response)
    assert progress["method"] == "notifications/progress" and progress["params"]["progressToken"] == "t"
    assert reply["id"] == 9 and reply["result"]["resultType"] == "complete"


async def test_a_call_past_the_request_timeout_is_cancelled_and_answered_with_a_tool_error() -> None:
    upstream = FakeUpstream()

    async def hangs(call: FakeCall) -> Any:
        await anyio.sleep_forever()

    upstream.handlers["tools/call"] = hangs
    upstream.handlers["resources/read"] = hangs
    async with endpoint([upstream], request_timeout=0.1) as client:
        call = (await modern(client, "tools/call", {"name": "slow"})).json()
        read = (await modern(client, "resources/read", {"uri": "x://y"})).json()
    assert call["result"]["isError"] is True and "--request-timeout" in call["result"]["content"][0]["text"]
    assert read["error"]["code"] == -32001
    assert upstream.cancelled == ["tools/call", "resources/read"]


async def test_mcp_param_headers_are_checked_against_the_arguments_and_go_on_with_the_call() -> None:
    region = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    upstream = FakeUpstream(tools=[tool("weather", inputSchema=region)])
    async with endpoint([upstream]) as client:
        await modern(client, "tools/list")
        arguments = {"name": "weather", "arguments": {"region": "eu"}}
        agreed = await modern(client, "tools/call", arguments, headers={"Mcp-Param-Region": "eu"})
        disagreed = await modern(client, "tools/call", arguments, headers={"Mcp-Param-Region": "us"})
        missing = await modern(client, "tools/call", arguments)
    assert agreed.status_code == 200 and "result" in agreed.json()
    assert upstream.last("tools/call").headers == {"mcp-param-region": "eu"}  # they go on with the call
    assert disagreed.status_code == 400 and disagreed.json()["error"]["code"] == jsonrpc.HEADER_MISMATCH
    assert missing.status_code == 400 and "Mcp-Param-Region header is missing" in missing.json()["error"]["message"]


# -- the session era, stateless ----------------------------------------------------------------


async def test_stateless_session_era_clients_share_the_router_and_batch_in_2025_03_26() -> None:
    upstream = FakeUpstream(era="legacy")
    async with endpoint([upstream]) as client:
        handshake = await legacy(
            client, message(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        )
        listed = await legacy(client, message(2, "tools/list"))
        batch = await legacy(client, [message(3, "ping"), message(4, "tools/list")], version="2025-03-26")
        too_new = await legacy(client, [message(5, "ping")])
        with_initialize = await legacy(client, [message(6, "initialize")], version="2025-03-26")
        delete = await client.delete("/mcp")
    assert "mcp-session-id" not in handshake.headers and handshake.json()["result"]["protocolVersion"] == "2025-06-18"
    assert listed.json()["result"]["tools"][0]["name"] == "echo"
    assert sorted(reply["id"] for reply in batch.json()) == [3, 4]
    assert too_new.status_code == 400 and "only 2025-03-26" in too_new.json()["error"]["message"]
    assert with_initialize.status_code == 400
    assert delete.status_code == 405


async def test_healthz_names_each_upstream_up_or_down() -> None:
    up, down = FakeUpstream("up"), FakeUpstream("down")
    await up.ensure_ready()
    down.refuse("exit status 1")
    async with endpoint([up, down]) as client:
        health = await client.get("/healthz")
    assert health.json() == {"status": "ok", "upstreams": {"up": "up", "down": "down"}}


async def test_healthz_reports_an_upstream_that_does_not_answer_its_probe_unresponsive() -> None:
    modern, legacy = FakeUpstream("modern"), FakeUpstream("legacy", era="legacy")
    for upstream in (modern, legacy):
        await upstream.ensure_ready()
    silent = anyio.Event()

    async def never(call: FakeCall) -> Any:
        await silent.wait()  # a stopped server: the probe's deadline ends the wait

    modern.handlers["server/discover"] = never
    async with endpoint([modern, legacy]) as client:
        with deadline(10):
            health = await client.get("/healthz")
    assert health.json()["upstreams"] == {"modern": "unresponsive", "legacy": "up"}
    assert legacy.methods()[-1] == "ping" and modern.cancelled == ["server/discover"]


# -- the session era, with sessions ------------------------------------------------------------


async def test_each_session_has_its_own_router_and_upstreams_until_deleted() -> None:
    made: list[FakeUpstream] = []

    def make() -> list[UpstreamBase]:
        made.append(FakeUpstream(era="legacy"))
        return [made[-1]]

    shared = FakeUpstream(era="legacy")
    initialize = message(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
    async with endpoint([shared], make) as client:
        first = await legacy(client, initialize)
        second = await legacy(client, initialize)
        one, two = first.headers["mcp-session-id"], second.headers["mcp-session-id"]
        listed = await legacy(client, message(2, "tools/list"), one)
        without = await legacy(client, message(3, "tools/list"))
        unknown = await legacy(client, message(4, "tools/list"), "no-such-session")
        ended = await client.delete("/mcp", headers={"Mcp-Session-Id": two})
        after = await legacy(client, message(5, "tools/list"), two)
    assert one != two and first.json()["result"]["protocolVersion"] == "2025-06-18"
    assert listed.json()["id"] == 2 and "tools" in listed.json()["result"]
    assert [u.methods() for u in made] == [["initialize", "tools/list"], ["initialize"]]
    assert shared.methods() == []  # the stateless Router is not a session's
    assert without.status_code == 400 and "initialize first" in without.json()["error"]["message"]
    assert unknown.status_code == 404
    assert ended.status_code == 200 and after.status_code == 404


async def test_sessions_past_the_limit_are_refused_until_one_ends() -> None:
    initialize = message(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
    async with endpoint([FakeUpstream(era="legacy")], lambda: [FakeUpstream(era="legacy")], max_sessions=1) as client:
        first = await legacy(client, initialize)
        refused = await legacy(client, initialize)
        await client.delete("/mcp", headers={"Mcp-Session-Id": first.headers["mcp-session-id"]})
        again = await legacy(client, initialize)
    assert refused.status_code == 503 and "too many sessions (1)" in refused.json()["error"]["message"]
    assert again.status_code == 200
