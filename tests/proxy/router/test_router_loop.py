"""The proxy in-process, over memory pipes, against a real upstream: nothing it does blocks
the event loop (blockbuster raises on any blocking call made from frugal_proxy's code)."""

from __future__ import annotations

import json
import math
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from blockbuster import blockbuster_ctx

from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.router.router import Router
from frugal_proxy.transports.lines import FrameReader, FrameWriter
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import notes_command

pytestmark = pytest.mark.anyio


class Pipe:
    """A byte pipe between the test and the session (ByteSource on one end, ByteSink on the other)."""

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


async def test_a_session_never_blocks_the_loop() -> None:
    to_proxy, from_proxy = Pipe(), Pipe()
    buffer = b""

    async def receive() -> Any:
        nonlocal buffer
        while b"\n" not in buffer:
            buffer += await from_proxy.read()
        line, _, buffer = buffer.partition(b"\n")
        return json.loads(line)

    async def send(message: Any) -> None:
        await to_proxy.write(json.dumps(message).encode() + b"\n")

    with anyio.fail_after(30), blockbuster_ctx(["frugal_proxy"]):
        async with (
            anyio.create_task_group() as tg,
            UpstreamConnection(notes_command(), name="notes") as upstream,
        ):
            await upstream.ensure_ready()
            session = Router(upstream, DownstreamPeer(FrameWriter(from_proxy)), tg)
            tg.start_soon(session.serve, FrameReader(to_proxy))
            meta = {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": "p1",
            }
            await send(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "count", "arguments": {"steps": 3}, "_meta": meta},
                }
            )
            kinds = []
            while True:
                message = await receive()
                kinds.append(message.get("method", "reply"))
                if message.get("id") == 1:
                    break
            assert kinds == ["notifications/progress"] * 3 + ["reply"]
            await send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "blob", "arguments": {"size": 1_000_000}, "_meta": meta},
                }
            )
            reply = await receive()
            while reply.get("id") != 2:
                reply = await receive()
            # Governed by default: cut to the byte budget, the rest spilled (hashed off the loop).
            shaped = reply["result"]["content"][0]["text"]
            assert len(shaped.encode()) < 32_768 and "frugal__fetch_slice" in shaped
            assert reply["result"]["_meta"]["frugal/governor"]["chars_total"] >= 2_000_000
            await send(
                {
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "tools/call",
                    "params": {"name": "crash", "arguments": {}, "_meta": meta},
                }
            )
            crashed = await receive()
            assert crashed["result"]["isError"] is True
            await to_proxy.close()
            await upstream.shutdown()
            tg.cancel_scope.cancel()
    to_proxy.dispose()
    from_proxy.dispose()


async def test_own_tools_are_listed_after_the_upstreams_and_called_through_the_pipeline() -> None:
    from frugal_proxy.pipeline.assembly import Assembly
    from frugal_proxy.providers.own_tools import OwnTool, ToolArgumentError
    from frugal_proxy.records import Exchange

    async def shout(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
        if not isinstance(arguments.get("text"), str):
            raise ToolArgumentError("send {'text': '...'}")
        return {"content": [{"type": "text", "text": arguments["text"].upper() + f" ({exchange.operator})"}]}

    tool = OwnTool("frugal__shout", "Upper-case a text.", {"type": "object"}, shout)
    to_proxy, from_proxy = Pipe(), Pipe()
    buffer = b""

    async def request(ident: int, method: str, params: dict[str, Any]) -> Any:
        nonlocal buffer
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        await to_proxy.write(
            json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": {**params, "_meta": meta}}).encode()
            + b"\n"
        )
        while True:
            while b"\n" not in buffer:
                buffer += await from_proxy.read()
            line, _, buffer = buffer.partition(b"\n")
            message = json.loads(line)
            if message.get("id") == ident:
                return message

    with anyio.fail_after(30):
        async with (
            anyio.create_task_group() as tg,
            UpstreamConnection(notes_command(), name="notes") as upstream,
        ):
            await upstream.ensure_ready()
            session = Router(
                upstream,
                DownstreamPeer(FrameWriter(from_proxy)),
                tg,
                assembly=Assembly(own_tools=[tool]),
                operator="alice",
            )
            tg.start_soon(session.serve, FrameReader(to_proxy))
            names = [t["name"] for t in (await request(1, "tools/list", {}))["result"]["tools"]]
            assert names[-1] == "frugal__shout" and "add" in names
            done = await request(2, "tools/call", {"name": "frugal__shout", "arguments": {"text": "hi"}})
            assert done["result"]["content"][0]["text"] == "HI (alice)"
            refused = await request(3, "tools/call", {"name": "frugal__shout", "arguments": {}})
            assert refused["result"]["isError"] is True
            assert "send {'text'" in refused["result"]["content"][0]["text"]
            await to_proxy.close()
            await upstream.shutdown()
            tg.cancel_scope.cancel()
    to_proxy.dispose()
    from_proxy.dispose()
