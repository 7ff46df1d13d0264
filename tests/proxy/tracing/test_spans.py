"""The spans of one agent call, in process: the Router reading a client over the stdio framing
(tests/proxy/router/test_router.py's `served`), in front of a fake upstream that records what it
got, with routed providers whose Web API is an httpx2 MockTransport that records the headers; the
spans go to the SDK's in-memory exporter. Checked: the tree (parents, kinds, names), the
conventions' attributes, the client's context as the parent, and the context each upstream
request and Web API request carried."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx2
import pytest
from blockbuster import blockbuster_ctx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from frugal_proxy import config, tracing
from frugal_proxy.config import GovernorSettings
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import registry
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import notes_command
from tests.fake_peers import FakeCall, FakeUpstream, tool
from tests.proxy.router.test_router import served

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
TRACESTATE = "rojo=00f067aa0ba902b7"
PAGES = {"pages": [{"id": 1, "key": "Proxy", "title": "Proxy", "excerpt": "a proxy"}]}
OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name not in ("wikipedia", "marginalia")
)
ROUTED = f"""
[search_providers.wikipedia]
base_url = "https://wiki.example"
[search_providers.marginalia]
base_url = "https://down.example"
{OFF}
[routing.search]
order = ["marginalia", "wikipedia"]
[limits]
retries = 1
"""


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    try:
        yield memory
    finally:
        tracing.uninstall()
        provider.shutdown()


class Api:
    """The Web APIs behind the routed providers: down.example fails (500), wiki.example finds a page."""

    def __init__(self) -> None:
        self.seen: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(request)
        if request.url.host == "down.example":
            return httpx2.Response(500)
        return httpx2.Response(200, json=PAGES)


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def hex_id(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


def legacy_meta(**extra: str) -> dict[str, Any]:
    return {"traceparent": TRACEPARENT, "tracestate": TRACESTATE, **extra}


async def handshake(wire: Any) -> None:
    own = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "agent"}}
    assert "result" in await wire.request(1, "initialize", own, modern=False)
    await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def test_a_routed_call_is_a_server_span_over_each_attempt_whose_context_each_web_api_request_carries(
    exporter: InMemorySpanExporter,
) -> None:
    api = Api()
    assembly = assemble(config=config.loads(ROUTED), environ={}, http=HttpClient(httpx2.MockTransport(api)))
    upstream = FakeUpstream(era="modern", tools=[tool("note")])
    async with served(upstream, seconds=20, assembly=assembly) as (_, wire):
        meta = {"traceparent": TRACEPARENT, "tracestate": TRACESTATE}
        reply = await wire.request(
            7, "tools/call", {"name": "frugal__search", "arguments": {"query": "proxy"}, "_meta": meta}
        )
    body = json.loads(reply["result"]["content"][0]["text"])
    assert body["provider_used"] == "wikipedia"
    spans = by_name(exporter.get_finished_spans())
    [server] = spans["tools/call frugal__search"]
    assert server.kind is SpanKind.SERVER
    assert f"{server.context.trace_id:032x}" == TRACE_ID and parent_of(server) == int(CLIENT_SPAN, 16)
    assert server.parent is not None and server.parent.is_remote
    assert dict(server.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "frugal__search",
        "gen_ai.operation.name": "execute_tool",
        "jsonrpc.request.id": "7",
        "mcp.protocol.version": "2026-07-28",
        "network.transport": "pipe",
        "frugal.provider_used": "wikipedia",
        "frugal.cost_micros": 0,
        "frugal.attempts": 2,
    }
    assert server.status.status_code is StatusCode.UNSET
    [down] = spans["attempt marginalia"]
    [won] = spans["attempt wikipedia"]
    assert parent_of(down) == parent_of(won) == server.context.span_id
    assert down.attributes is not None and won.attributes is not None
    assert down.attributes["frugal.attempt.outcome"] == "transient" and down.attributes["error.type"] == "transient"
    assert down.attributes["frugal.attempt.retries"] == 1 and down.status.status_code is StatusCode.ERROR
    assert won.attributes["frugal.attempt.outcome"] == "ok" and won.attributes["frugal.attempt.retries"] == 0
    assert won.attributes["frugal.attempt.cost_micros"] == 0 and "error.type" not in won.attributes
    # Each Web API request carried its attempt's context (the retry too), in the client's trace,
    # with the client's tracestate.
    sent = [request.headers["traceparent"] for request in api.seen]
    assert [request.url.host for request in api.seen] == ["down.example", "down.example", "wiki.example"]
    assert sent == [f"00-{TRACE_ID}-{hex_id(span)}-01" for span in (down, down, won)]
    assert {request.headers["tracestate"] for request in api.seen} == {TRACESTATE}
    assert len(exporter.get_finished_spans()) == 3
    assert all(span.context.trace_id == server.context.trace_id for span in exporter.get_finished_spans())


async def test_a_plain_call_is_a_client_span_whose_context_goes_upstream_in_meta(
    exporter: InMemorySpanExporter,
) -> None:
    upstream = FakeUpstream(era="legacy", tools=[tool("note")])
    async with served(upstream, seconds=20) as (_, wire):
        await handshake(wire)
        params = {"name": "note", "arguments": {}, "_meta": legacy_meta(keep="this")}
        reply = await wire.request(2, "tools/call", params, modern=False)
    assert "result" in reply
    spans = by_name(exporter.get_finished_spans())
    [server, client] = sorted(spans["tools/call note"], key=lambda span: span.kind is SpanKind.CLIENT)
    [attempt] = [span for name, found in spans.items() if name.startswith("attempt ") for span in found]
    assert server.kind is SpanKind.SERVER and parent_of(server) == int(CLIENT_SPAN, 16)
    assert (server.attributes or {})["mcp.protocol.version"] == "2025-11-25"
    assert parent_of(attempt) == server.context.span_id and parent_of(client) == attempt.context.span_id
    assert client.name == "tools/call note" and dict(client.attributes or {}) == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "note",
        "gen_ai.operation.name": "execute_tool",
        "frugal.upstream": upstream.name,
        "network.transport": "pipe",
        "mcp.protocol.version": "2025-11-25",  # what the upstream's initialize agreed
    }
    sent = upstream.last("tools/call").params["_meta"]
    # The upstream's parent is the proxy's client span; the client's own keys go on as they came.
    assert sent["traceparent"] == f"00-{TRACE_ID}-{hex_id(client)}-01"
    assert sent["tracestate"] == TRACESTATE and sent["keep"] == "this"


async def test_a_call_without_context_starts_a_trace_and_still_hands_it_upstream(
    exporter: InMemorySpanExporter,
) -> None:
    upstream = FakeUpstream(era="modern", tools=[tool("note")])
    async with served(upstream) as (_, wire):
        assert "result" in await wire.request(3, "tools/call", {"name": "note", "arguments": {}})
    server = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER)
    client = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT)
    assert server.parent is None
    sent = upstream.last("tools/call").params["_meta"]
    assert sent["traceparent"] == f"00-{server.context.trace_id:032x}-{hex_id(client)}-{client.context.trace_flags:02x}"


async def test_a_bad_traceparent_is_a_warning_and_the_call_is_served_in_a_new_trace(
    exporter: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = FakeUpstream(era="modern", tools=[tool("note")])
    async with served(upstream) as (_, wire):
        with caplog.at_level(logging.WARNING, logger="frugal_proxy.tracing"):
            bad = await wire.request(4, "tools/call", {"name": "note", "arguments": {}, "_meta": {"traceparent": "zz"}})
            worse = await wire.request(5, "tools/call", {"name": "note", "arguments": {}, "_meta": {"traceparent": 7}})
            good = await wire.request(6, "tools/call", {"name": "note", "arguments": {}, "_meta": legacy_meta()})
    assert "result" in bad and "result" in worse and "result" in good
    warned = [r for r in caplog.records if "traceparent is not W3C Trace Context" in r.getMessage()]
    assert len(warned) == 2 and all(r.levelno == logging.WARNING for r in warned)
    servers = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert [s.parent is None for s in servers] == [True, True, False]


async def test_errors_are_the_conventions_error_type(exporter: InMemorySpanExporter) -> None:
    upstream = FakeUpstream(era="modern", tools=[tool("note")])

    async def failing(call: FakeCall) -> Any:
        return {"content": [{"type": "text", "text": "no"}], "isError": True, "resultType": "complete"}

    upstream.handlers["tools/call"] = failing
    async with served(upstream) as (_, wire):
        await wire.request(8, "tools/call", {"name": "note", "arguments": {}})
        await wire.request(9, "tools/call", {"arguments": {}})  # no name: -32602
    servers = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    tool_failed, refused = servers
    assert (tool_failed.attributes or {})["error.type"] == "tool_error"
    assert tool_failed.status.status_code is StatusCode.ERROR
    assert refused.name == "tools/call" and (refused.attributes or {})["error.type"] == "-32602"
    assert (refused.attributes or {})["rpc.response.status_code"] == "-32602"
    assert refused.status.description == "tools/call needs a string 'name'"
    client = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT)
    assert (client.attributes or {})["error.type"] == "tool_error"


async def test_a_governor_cut_is_a_span_with_the_bytes_in_and_out(exporter: InMemorySpanExporter) -> None:
    upstream = FakeUpstream(era="modern", tools=[tool("note")])

    async def large(call: FakeCall) -> Any:
        return {"content": [{"type": "text", "text": "frugal proxy. " * 5000}], "resultType": "complete"}

    upstream.handlers["tools/call"] = large
    assembly = assemble(GovernorSettings(max_bytes=4000), environ={})
    async with served(upstream, seconds=20, assembly=assembly) as (_, wire):
        reply = await wire.request(10, "tools/call", {"name": "note", "arguments": {}})
    assert "result" in reply
    [cut] = [s for s in exporter.get_finished_spans() if s.name == "govern note"]
    server = next(s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER)
    attributes = cut.attributes or {}
    assert parent_of(cut) == server.context.span_id and attributes["frugal.route"] == "note"
    assert attributes["frugal.governor.bytes_in"] > 50_000 > attributes["frugal.governor.bytes_out"] > 0


async def test_off_nothing_is_recorded_and_the_clients_context_goes_on_as_it_came() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))  # installed nowhere: tracing is off
    upstream = FakeUpstream(era="legacy", tools=[tool("note")])
    assert tracing.live is None
    async with served(upstream) as (_, wire):
        await handshake(wire)
        reply = await wire.request(
            2, "tools/call", {"name": "note", "arguments": {}, "_meta": legacy_meta()}, modern=False
        )
    assert "result" in reply and memory.get_finished_spans() == ()
    assert upstream.last("tools/call").params["_meta"] == legacy_meta()


async def test_traced_the_router_never_blocks_the_loop() -> None:
    """With the batch processor `serve` installs (export on a thread of its own), a traced call
    through a real upstream makes no blocking call from frugal_proxy's code."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    tracing.install(provider)
    try:
        with blockbuster_ctx(["frugal_proxy"]):
            async with (
                UpstreamConnection(notes_command(), name="notes") as upstream,
                served(upstream, seconds=30) as (_, wire),
            ):
                await upstream.ensure_ready()
                meta = {"traceparent": TRACEPARENT}
                added = await wire.request(
                    1, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}, "_meta": meta}
                )
        assert "result" in added
    finally:
        tracing.uninstall()
        provider.shutdown()


class HttpUpstream:
    """What a client span reads of a URL upstream (upstream.http: its name, era, URL, session)."""

    name = "remote"
    era = "legacy"
    url = "https://mcp.example:8443/mcp"
    initialize_result: ClassVar[dict[str, str]] = {"protocolVersion": "2025-06-18"}


async def test_a_url_upstreams_client_span_names_its_address_and_port(exporter: InMemorySpanExporter) -> None:
    assert tracing.live is not None
    with tracing.client_span("prompts/get", {"name": jsonrpc.raw("review")}, HttpUpstream()):
        pass
    [span] = exporter.get_finished_spans()
    assert span.name == "prompts/get review" and span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        "mcp.method.name": "prompts/get",
        "gen_ai.prompt.name": "review",
        "frugal.upstream": "remote",
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "server.address": "mcp.example",
        "server.port": 8443,
        "mcp.protocol.version": "2025-06-18",
    }
