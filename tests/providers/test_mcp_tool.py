"""The MCP tool provider classifies what its forwarder does, with a fake forwarder in place of
the session's link (no upstream, no patching)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import msgspec
import pytest

from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.mcp_tool import McpToolProvider
from frugal_proxy.records import Call, Exchange, Outcome, ProgressSink, Route

pytestmark = pytest.mark.anyio


class FakeForwarder:
    """A forwarder whose answer (or fault) comes from a handler; it records what it was asked."""

    def __init__(self, handler: Callable[[], Awaitable[Frame]]) -> None:
        self.handler = handler
        self.calls: list[tuple[str, dict[str, msgspec.Raw], Mapping[str, str] | None]] = []

    async def __call__(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        on_progress: ProgressSink | None,
        headers: Mapping[str, str] | None,
    ) -> Frame:
        self.calls.append((method, params, headers))
        return await self.handler()


def raising(exc: Exception) -> Callable[[], Awaitable[Frame]]:
    async def handler() -> Frame:
        raise exc

    return handler


async def call(
    handler: Callable[[], Awaitable[Frame]],
    headers: Mapping[str, str] | None = None,
) -> Outcome:
    forward = FakeForwarder(handler)
    provider = McpToolProvider("remote", forward)
    params = {"name": jsonrpc.raw("search"), "arguments": jsonrpc.raw({"q": "x"})}
    ident = Call(request_id=1, tool="search", params=params, forwarded_headers=headers)
    exchange = Exchange(call=ident, route=Route("search", ("remote",)))
    with anyio.fail_after(5):
        outcome = await provider.call(exchange)
    assert forward.calls == [("tools/call", params, headers)]  # the call's headers go on with it
    return outcome


async def test_a_reply_is_the_upstreams_own_answer() -> None:
    reply = jsonrpc.result(7, {"content": [], "isError": True})

    async def answer() -> Frame:
        return reply

    assert await call(answer) == Outcome("ok", reply=reply)
    assert await call(answer, headers={"mcp-param-region": "eu"}) == Outcome("ok", reply=reply)


async def test_refused_credentials_are_permanent() -> None:
    refused = UpstreamError("upstream 'remote': refused the proxy's credentials (HTTP 401)", permanent=True)
    outcome = await call(raising(refused))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("permanent", str(refused), None)


async def test_a_server_that_says_when_to_come_back_is_rate_limiting() -> None:
    limited = UpstreamError("upstream 'remote': is rate limiting (HTTP 429); retry after 30 s", retry_after=30.0)
    outcome = await call(raising(limited))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("rate_limited", str(limited), 30.0)


@pytest.mark.parametrize(
    "fault",
    [
        UpstreamDown("remote", "exited with status 1", ["Traceback …"]),
        UpstreamError("upstream 'remote' answered with something that is not JSON-RPC"),
    ],
)
async def test_any_other_fault_is_transient(fault: UpstreamError) -> None:
    outcome = await call(raising(fault))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("transient", str(fault), None)


async def test_a_route_candidate_calls_its_own_tool_and_fails_over_on_a_json_rpc_error() -> None:
    async def refused() -> Frame:
        return jsonrpc.error(1, jsonrpc.INVALID_PARAMS, "unknown tool: web_search")

    async def answered() -> Frame:
        return jsonrpc.result(1, {"content": [], "isError": True})

    params = {"name": jsonrpc.raw("search"), "arguments": jsonrpc.raw({"q": "x"})}
    exchange = Exchange(call=Call(1, "search", params), route=Route("search", ("routes/eu.web_search",)))
    for handler, kind in ((refused, "permanent"), (answered, "ok")):
        forward = FakeForwarder(handler)
        provider = McpToolProvider("eu", forward, tool="web_search")
        with anyio.fail_after(5):
            outcome = await provider.call(exchange)
        assert provider.spec.name == "eu.web_search" and outcome.kind == kind
        [(_, sent, _)] = forward.calls
        assert sent == {**params, "name": jsonrpc.raw("web_search")}  # the name its upstream knows
    refusal = await McpToolProvider("eu", FakeForwarder(refused), tool="web_search").call(exchange)
    assert refusal.message == "eu.web_search refused the call (unknown tool: web_search)"
