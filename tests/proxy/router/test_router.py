"""The Router reading a client over in-memory byte pipes (the stdio framing), in front of fake
upstreams, and in front of a real one: the handshakes, ping, tools/list with the proxy's own
tools, tools/call through the pipeline, cancellation, bad lines; and nothing it does blocks the
event loop (blockbuster raises on any blocking call made from frugal_proxy's code)."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from blockbuster import blockbuster_ctx

from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.pipeline.assembly import Assembly
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.providers.own_tools import LISTING_TTL_MS, OwnTool, ToolArgumentError
from frugal_proxy.records import Exchange
from frugal_proxy.router.router import Router
from frugal_proxy.transports.lines import FrameReader, FrameWriter
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import notes_command
from tests.fake_peers import FakeCall, FakeUpstream, tool
from tests.pace import deadline

pytestmark = pytest.mark.anyio

META = {eras.META_VERSION: eras.LATEST_MODERN, eras.META_CAPABILITIES: {}}


class Pipe:
    """A byte pipe between the test and the router (ByteSource on one end, ByteSink on the other)."""

    def __init__(self) -> None:
        self.send: MemoryObjectSendStream[bytes]
        self.receive: MemoryObjectReceiveStream[bytes]
        self.send, self.receive = anyio.create_memory_object_stream[bytes](math.inf)

    async def read(self) -> bytes:
        try:
            return await self.receive.receive()
        except anyio.EndOfStream:
            return b""

    async def write(self, data: bytes) -> None:
        await self.send.send(data)

    async def close(self) -> None:
        await self.send.aclose()

    def dispose(self) -> None:
        self.send.close()
        self.receive.close()


class Wire:
    """The client's end: lines to the router, and what the router sent back, line by line."""

    def __init__(self) -> None:
        self.to_proxy, self.from_proxy = Pipe(), Pipe()
        self.seen: list[Any] = []  # everything received, notifications included
        self._buffer = b""

    async def line(self, data: bytes) -> None:
        await self.to_proxy.write(data + b"\n")

    async def send(self, message: Any) -> None:
        await self.line(json.dumps(message).encode())

    async def receive(self) -> Any:
        while b"\n" not in self._buffer:
            self._buffer += await self.from_proxy.read()
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = json.loads(line)
        self.seen.append(message)
        return message

    async def reply_to(self, ident: Any) -> Any:
        while True:
            message = await self.receive()
            if isinstance(message, dict) and message.get("id") == ident and "method" not in message:
                return message

    async def request(
        self, ident: Any, method: str, params: dict[str, Any] | None = None, *, modern: bool = True
    ) -> Any:
        params = dict(params or {})
        if modern:
            params["_meta"] = {**META, **params.get("_meta", {})}
        await self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        return await self.reply_to(ident)


@asynccontextmanager
async def served(
    upstreams: UpstreamBase | list[UpstreamBase], seconds: float = 5, reader_bytes: int | None = None, **options: Any
) -> AsyncIterator[tuple[Router, Wire]]:
    """A Router serving a Wire until the test is done with it."""
    wire = Wire()
    reader = FrameReader(wire.to_proxy) if reader_bytes is None else FrameReader(wire.to_proxy, reader_bytes)
    try:
        with deadline(seconds):
            async with anyio.create_task_group() as tg:
                router = Router(upstreams, DownstreamPeer(FrameWriter(wire.from_proxy)), tg, **options)
                tg.start_soon(router.serve, reader)
                yield router, wire
                await wire.to_proxy.close()
                tg.cancel_scope.cancel()
    finally:
        wire.to_proxy.dispose()
        wire.from_proxy.dispose()


async def shout(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
    if not isinstance(arguments.get("text"), str):
        raise ToolArgumentError("send {'text': '...'}")
    return {"content": [{"type": "text", "text": arguments["text"].upper() + f" ({exchange.operator})"}]}


SHOUT = OwnTool("frugal__shout", "Upper-case a text.", {"type": "object"}, shout)


class Recorder(Policy):
    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[Exchange] = []

    async def seal(self, exchange: Exchange) -> None:
        self.seen.append(exchange)


def result(reply: Any) -> Any:
    assert "result" in reply, reply
    return reply["result"]


# -- handshakes and ping -----------------------------------------------------------------------


async def test_a_session_era_initialize_passes_through_and_ping_is_answered_here() -> None:
    upstream = FakeUpstream(era="legacy", capabilities={"tools": {}, "logging": {}})
    async with served(upstream) as (_, wire):
        early = await wire.request(1, "ping", modern=False)  # before initialize: answered, not refused
        own = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {}}, "clientInfo": {"name": "c"}}
        handshake = result(await wire.request(2, "initialize", own, modern=False))
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        pong = await wire.request(3, "ping", modern=False)
    assert result(early) == {} and result(pong) == {}
    assert handshake["protocolVersion"] == "2025-06-18" and handshake["capabilities"] == {"tools": {}, "logging": {}}
    assert upstream.last("initialize").params == own
    assert "ping" not in upstream.methods()
    assert upstream.notifications == [("notifications/initialized", None)]  # the proxy's own, not the client's


async def test_a_2026_07_28_ping_is_refused_as_on_http() -> None:
    """ping (and the other session-era methods) are not part of 2026-07-28: refused on stdio as
    the HTTP endpoint refuses them, never forwarded."""
    upstream = FakeUpstream(era="legacy")
    async with served(upstream) as (_, wire):
        ping = await wire.request(1, "ping")
        level = await wire.request(2, "logging/setLevel", {"level": "info"})
    assert ping["error"]["code"] == level["error"]["code"] == jsonrpc.METHOD_NOT_FOUND
    assert ping["error"]["message"].startswith("ping is not part of MCP 2026-07-28")
    assert "ping" not in upstream.methods() and "logging/setLevel" not in upstream.methods()


async def test_server_discover_is_answered_with_the_own_tools_cache_bound() -> None:
    upstream = FakeUpstream(era="modern", cache=(10 * LISTING_TTL_MS, "public"))
    async with served(upstream, assembly=Assembly(own_tools=[SHOUT])) as (_, wire):
        discovered = result(await wire.request(1, "server/discover"))
    assert discovered["ttlMs"] == LISTING_TTL_MS and discovered["supportedVersions"] == list(eras.MODERN_VERSIONS)
    assert "server/discover" not in upstream.methods()  # described from the probe's answer


async def test_a_request_that_is_neither_era_is_refused_with_what_to_send() -> None:
    async with served(FakeUpstream()) as (_, wire):
        reply = await wire.request(1, "tools/list", modern=False)
        wrong = await wire.request(2, "tools/list", {"_meta": {eras.META_VERSION: "1999-01-01"}})
    assert reply["error"]["code"] == jsonrpc.INVALID_PARAMS and "initialize first" in reply["error"]["message"]
    assert wrong["error"]["code"] == jsonrpc.UNSUPPORTED_PROTOCOL_VERSION


# -- tools -------------------------------------------------------------------------------------


async def test_tools_list_adds_the_own_tools_to_the_last_page_only() -> None:
    upstream = FakeUpstream(era="modern", cache=(10 * LISTING_TTL_MS, "public"))

    async def two_pages(call: FakeCall) -> Any:
        if call.params.get("cursor") is None:
            return {"tools": [tool("a")], "nextCursor": "2", "resultType": "complete", "ttlMs": 0}
        return {"tools": [tool("b")], "resultType": "complete", "ttlMs": 10 * LISTING_TTL_MS}

    upstream.handlers["tools/list"] = two_pages
    async with served(upstream, assembly=Assembly(own_tools=[SHOUT])) as (_, wire):
        first = result(await wire.request(1, "tools/list"))
        last = result(await wire.request(2, "tools/list", {"cursor": "2"}))
    assert [t["name"] for t in first["tools"]] == ["a"]
    assert [t["name"] for t in last["tools"]] == ["b", "frugal__shout"]
    assert last["ttlMs"] == LISTING_TTL_MS  # the page's hints cover the own tools' part too


async def test_tools_call_goes_through_the_pipeline_to_the_upstream_or_the_own_tool() -> None:
    recorder = Recorder()
    upstream = FakeUpstream(era="modern")
    assembly = Assembly(policies=[recorder], own_tools=[SHOUT])
    async with served(upstream, assembly=assembly, operator="alice") as (_, wire):
        echoed = result(await wire.request(1, "tools/call", {"name": "echo", "arguments": {"x": 1}}))
        shouted = result(await wire.request(2, "tools/call", {"name": "frugal__shout", "arguments": {"text": "hi"}}))
        refused = result(await wire.request(3, "tools/call", {"name": "frugal__shout", "arguments": {}}))
    assert echoed["content"][0]["text"] == 'echo {"x":1}'
    assert shouted["content"][0]["text"] == "HI (alice)"
    assert refused["isError"] is True and "send {'text'" in refused["content"][0]["text"]
    assert [(ex.call.tool, ex.route.providers, ex.operator) for ex in recorder.seen] == [
        ("echo", ("fake",), "alice"),
        ("frugal__shout", ("frugal",), "alice"),
        ("frugal__shout", ("frugal",), "alice"),
    ]
    assert recorder.seen[0].receipt is not None and recorder.seen[0].receipt.provider_used == "fake"
    assert upstream.methods().count("tools/call") == 1


async def test_progress_reaches_the_client_under_its_own_token() -> None:
    upstream = FakeUpstream(era="modern")

    async def counts(call: FakeCall) -> Any:
        await call.progress(1)
        await call.progress(2)
        return {"content": [], "resultType": "complete"}

    upstream.handlers["tools/call"] = counts
    async with served(upstream) as (_, wire):
        await wire.request(1, "tools/call", {"name": "count", "_meta": {"progressToken": "mine"}})
    progress = [m["params"] for m in wire.seen if m.get("method") == "notifications/progress"]
    assert progress == [{"progressToken": "mine", "progress": 1}, {"progressToken": "mine", "progress": 2}]
    assert upstream.last("tools/call").params["_meta"]["progressToken"] != "mine"  # mapped upstream


async def test_a_cancelled_call_is_cancelled_upstream_and_gets_no_reply() -> None:
    upstream = FakeUpstream(era="modern")
    started = anyio.Event()

    async def hangs(call: FakeCall) -> Any:
        started.set()
        await anyio.sleep_forever()

    upstream.handlers["tools/call"] = hangs
    async with served(upstream) as (_, wire):
        await wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "_meta": META}})
        await started.wait()
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        after = await wire.request(2, "tools/list")
    assert "tools" in result(after)
    assert upstream.cancelled == ["tools/call"]
    assert [m.get("id") for m in wire.seen] == [2]


# -- bad input ---------------------------------------------------------------------------------


async def test_bad_lines_are_answered_and_the_router_keeps_serving() -> None:
    upstream = FakeUpstream(era="modern")
    async with served(upstream, reader_bytes=4096) as (_, wire):
        await wire.line(b"this is not json")
        garbage = await wire.receive()
        await wire.line(b'{"jsonrpc": "2.0", "id": 7}')
        neither = await wire.receive()
        await wire.line(b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"x": "' + b"y" * 5000 + b'"}}')
        oversized = await wire.receive()
        await wire.send({"jsonrpc": "2.0", "id": 99, "result": {}})  # a reply to nothing: dropped
        served_after = await wire.request(9, "tools/list")
    assert garbage["error"]["code"] == jsonrpc.PARSE_ERROR and garbage["id"] is None
    assert neither["error"]["code"] == jsonrpc.INVALID_REQUEST and neither["id"] == 7
    assert oversized["error"]["code"] == jsonrpc.INVALID_REQUEST and oversized["id"] == 8
    assert "line cap" in oversized["error"]["message"]
    assert "tools" in result(served_after)
    assert upstream.methods() == ["tools/list"]


async def test_a_session_era_batch_is_answered_with_one_array() -> None:
    async with served(FakeUpstream(era="legacy")) as (_, wire):
        await wire.request(1, "initialize", {"protocolVersion": "2025-03-26", "capabilities": {}}, modern=False)
        await wire.send(
            [
                {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            ]
        )
        replies = await wire.receive()
    assert sorted(reply["id"] for reply in replies) == [2, 3]


# -- several upstreams -------------------------------------------------------------------------


async def test_several_upstreams_are_merged_and_called_by_their_exposed_names() -> None:
    files = FakeUpstream("files", era="legacy", tools=[tool("read")])
    web = FakeUpstream("web", era="modern", tools=[tool("search")])
    web.refuse("connection refused")
    async with served([files, web], assembly=Assembly(own_tools=[SHOUT])) as (_, wire):
        await wire.request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}, modern=False)
        listed = result(await wire.request(2, "tools/list", modern=False))
        read = result(await wire.request(3, "tools/call", {"name": "files__read", "arguments": {}}, modern=False))
        down = result(await wire.request(4, "tools/call", {"name": "web__search"}, modern=False))
        unknown = await wire.request(5, "tools/call", {"name": "nobody__offers"}, modern=False)
    assert [t["name"] for t in listed["tools"]] == ["files__read", "frugal__shout"]
    assert read["content"][0]["text"] == "read {}"  # the upstream got the name it knows
    assert down["isError"] is True and "connection refused" in down["content"][0]["text"]
    assert unknown["error"]["code"] == jsonrpc.INVALID_PARAMS


# -- against a real upstream -------------------------------------------------------------------


async def test_a_router_never_blocks_the_loop() -> None:
    with blockbuster_ctx(["frugal_proxy"]):
        async with (
            UpstreamConnection(notes_command(), name="notes") as upstream,
            served(upstream, seconds=30) as (_, wire),
        ):
            await upstream.ensure_ready()
            counted = await wire.request(
                1, "tools/call", {"name": "count", "arguments": {"steps": 3}, "_meta": {"progressToken": "p1"}}
            )
            kinds = [m.get("method", "reply") for m in wire.seen]
            assert kinds == ["notifications/progress"] * 3 + ["reply"] and "result" in counted
            blob = result(await wire.request(2, "tools/call", {"name": "blob", "arguments": {"size": 1_000_000}}))
            # Governed by default: cut to the byte budget, the rest spilled (hashed off the loop).
            shaped = blob["content"][0]["text"]
            assert len(shaped.encode()) < 32_768 and "frugal__fetch_slice" in shaped
            assert blob["_meta"]["frugal/governor"]["chars_total"] >= 2_000_000
            crashed = result(await wire.request(3, "tools/call", {"name": "crash", "arguments": {}}))
            assert crashed["isError"] is True
            await upstream.shutdown()


async def test_own_tools_are_listed_after_a_real_upstreams_tools() -> None:
    async with (
        UpstreamConnection(notes_command(), name="notes") as upstream,
        served(upstream, seconds=30, assembly=Assembly(own_tools=[SHOUT])) as (_, wire),
    ):
        await upstream.ensure_ready()
        names = [t["name"] for t in result(await wire.request(1, "tools/list"))["tools"]]
        await upstream.shutdown()
    assert names[-1] == "frugal__shout" and "add" in names


async def test_requests_are_answered_side_by_side_and_end_with_the_client() -> None:
    upstream = FakeUpstream(era="modern")
    release = anyio.Event()

    async def waits(call: FakeCall) -> Any:
        if call.params.get("name") == "slow":
            await release.wait()
        return {"content": [{"type": "text", "text": str(call.params.get("name"))}], "resultType": "complete"}

    upstream.handlers["tools/call"] = waits
    wire = Wire()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            router = Router(upstream, DownstreamPeer(FrameWriter(wire.from_proxy)), tg)

            async def serve() -> None:
                await router.serve(FrameReader(wire.to_proxy))
                await router.drain()

            tg.start_soon(serve)
            await wire.send(
                {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": {"name": "slow", "_meta": META}}
            )
            for round_ in range(3):  # the tasks that answered take the next requests, the slow one still waits
                for ident in range(1, 11):
                    await wire.request(100 * round_ + ident, "tools/call", {"name": f"fast{ident}"})
            release.set()
            assert result(await wire.reply_to(0))["content"][0]["text"] == "slow"
            await wire.to_proxy.close()  # the client goes: serve ends, and so does every idle task
    wire.to_proxy.dispose()
    wire.from_proxy.dispose()
    assert upstream.methods().count("tools/call") == 31
