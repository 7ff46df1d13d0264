"""The connection caps' bookkeeping (the deadlines and the 503s on the wire: tests/e2e/test_http_limits.py),
and what the protocol gives a request: the disconnect hook, its writes sent together."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import uvicorn

from frugal_proxy.server.connections import DISCONNECT_HOOK, ConnectionLimits, limited_protocol, plain_response

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(app: Callable[..., Any]) -> AsyncIterator[int]:
    """`app` served by uvicorn with the proxy's protocol on 127.0.0.1, in this event loop; its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    protocol = limited_protocol(ConnectionLimits())
    config = uvicorn.Config(app, log_level="warning", lifespan="off", ws="none", http=protocol)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])  # the socket listens already: a client's connection waits for it
        try:
            yield sock.getsockname()[1]
        finally:
            server.should_exit = True
    sock.close()


REQUEST = b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"


async def test_a_client_that_disconnects_cancels_what_its_request_handed_the_hook() -> None:
    lost = anyio.Event()
    handed = anyio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        with anyio.CancelScope() as waiting:
            scope["extensions"][DISCONNECT_HOOK](waiting.cancel)
            handed.set()
            await anyio.sleep(30)  # the answer never comes: only the disconnect ends this
        lost.set()

    async with serving(app) as port:
        with anyio.fail_after(10):
            client = await anyio.connect_tcp("127.0.0.1", port)
            await client.send(REQUEST)
            await handed.wait()
            await client.aclose()
            await lost.wait()


async def test_a_callback_taken_back_is_not_run_and_one_after_the_disconnect_runs_at_once() -> None:
    called: list[str] = []
    done = anyio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        hook = scope["extensions"][DISCONNECT_HOOK]
        hook(lambda: called.append("taken back"))()
        while (await receive())["type"] != "http.disconnect":
            pass
        hook(lambda: called.append("late"))
        done.set()

    async with serving(app) as port:
        with anyio.fail_after(10):
            client = await anyio.connect_tcp("127.0.0.1", port)
            await client.send(REQUEST)
            await anyio.sleep(0.1)
            await client.aclose()
            await done.wait()
    assert called == ["late"]


async def test_what_a_response_writes_in_pieces_arrives_whole_and_in_order() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for piece in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async with serving(app) as port:
        with anyio.fail_after(10):
            client = await anyio.connect_tcp("127.0.0.1", port)
            # two requests on one connection, the second malformed: its 400 comes after the first answer
            await client.send(REQUEST + b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
            received = b""
            while b"\r\n\r\n" not in received.partition(b"0\r\n\r\n")[2]:
                received += await client.receive()
            await client.aclose()
    first, _, second = received.partition(b"0\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n")
    assert second.startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_each_ip_has_its_share_and_all_share_the_overall_cap() -> None:
    limits = ConnectionLimits(overall=3, per_ip=2)
    assert limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.1") is None
    per_ip = limits.admit("10.0.0.1")
    assert per_ip is not None and "--max-connections-per-ip" in per_ip and "10.0.0.1 (2" in per_ip
    assert limits.admit("10.0.0.2") is None
    overall = limits.admit("10.0.0.3")
    assert overall is not None and "--max-connections" in overall and "(3," in overall
    assert (limits.total, dict(limits.open)) == (3, {"10.0.0.1": 2, "10.0.0.2": 1})


def test_a_closed_connection_gives_its_place_back() -> None:
    limits = ConnectionLimits(overall=1, per_ip=1)
    assert limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.2") is not None  # refused ones are not counted
    limits.release("10.0.0.1")
    assert (limits.total, dict(limits.open)) == (0, {})
    assert limits.admit("10.0.0.2") is None


def test_a_refusal_is_a_whole_response_that_closes_the_connection() -> None:
    response = plain_response(503, "Service Unavailable", "too_many_connections", "full", "retry-after: 1\r\n")
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"connection: close" in head and b"retry-after: 1" in head
    assert f"content-length: {len(body)}".encode() in head
    assert json.loads(body) == {"error": "too_many_connections", "message": "full"}


def test_a_flood_of_refusals_is_logged_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    limits = ConnectionLimits()
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.http_connections"):
        for second in range(25):
            limits.warn("connection refused", float(second), status=503)
    records = [record for record in caplog.records if record.getMessage() == "connection refused"]
    assert [record.__dict__["also_since_last"] for record in records] == [0, 9, 9]
