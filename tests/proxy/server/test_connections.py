"""The connection caps' bookkeeping (the deadlines and the 503s on the wire: tests/e2e/test_http_limits.py),
what the protocol gives a request (the disconnect hook, its writes sent together) and the
requests it refuses with a 400 saying why."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httptools
import pytest
import uvicorn

from frugal_proxy.server import connections
from frugal_proxy.server.connections import (
    DISCONNECT_HOOK,
    MAX_HEAD_BYTES,
    RESPOND_HOOK,
    RESPONDED_KEY,
    ConnectionLimits,
    LimitedHttpToolsProtocol,
    limited_protocol,
    plain_response,
)
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serving(
    app: Callable[..., Any], limits: ConnectionLimits | None = None, keep_alive: float = 5.0, access_log: bool = True
) -> AsyncIterator[int]:
    """`app` served by uvicorn with the proxy's protocol on 127.0.0.1, in this event loop; its port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    protocol = limited_protocol(limits or ConnectionLimits())
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        ws="none",
        http=protocol,
        timeout_keep_alive=keep_alive,
        access_log=access_log,
    )
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
        with deadline(10):
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
        with deadline(10):
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
        with deadline(10):
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


async def test_a_response_written_whole_is_what_send_would_have_written_and_its_status_is_noted() -> None:
    noted: list[Any] = []
    body = b'{"ok":true}'
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        if scope["path"] == "/whole":
            assert scope["extensions"][RESPOND_HOOK](scope, 201, headers, body)
            assert not scope["extensions"][RESPOND_HOOK](scope, 201, headers, body)  # once only: it has started
            noted.append(scope.get(RESPONDED_KEY))
        else:
            await send({"type": "http.response.start", "status": 201, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            noted.append(scope.get(RESPONDED_KEY))

    def without_date(response: bytes) -> bytes:
        return b"\r\n".join(line for line in response.split(b"\r\n") if not line.startswith(b"date: "))

    async with serving(app, access_log=False) as port:  # (with an access log kept, `send` writes it)
        with deadline(10):
            requests = [
                b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n%s\r\n{}" % (path, extra)
                for path in (b"/whole", b"/sent")
                for extra in (b"", b"Connection: close\r\n")
            ]
            answers = [await exchange(port, request) for request in requests]
    whole, whole_closed, sent, sent_closed = (without_date(answer) for answer in answers)
    assert whole == sent and whole_closed == sent_closed  # the same bytes either way, a closed connection too
    assert whole.startswith(b"HTTP/1.1 201 Created\r\n") and whole.endswith(b"\r\n\r\n" + body)
    assert b"connection: close\r\n" in whole_closed and b"connection: close" not in whole
    assert all(b"date: " in answer for answer in answers)  # uvicorn's default headers come too
    assert noted == [201, 201, None, None]


async def echo_headers(scope: Any, receive: Any, send: Any) -> None:
    """An app answering with the request's headers as JSON."""
    while (await receive()).get("more_body"):
        pass
    body = json.dumps([[key.decode(), value.decode()] for key, value in scope["headers"]]).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def exchange(port: int, *pieces: bytes, pause: float = 0.0) -> bytes:
    """Send `pieces` (`pause` s apart) and return everything received until the server closes
    the connection or 3 s pass."""
    received = b""
    async with await anyio.connect_tcp("127.0.0.1", port) as client:
        for piece in pieces:
            await client.send(piece)
            await anyio.sleep(pause)
        with anyio.move_on_after(3):
            try:
                while True:
                    received += await client.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return received


@pytest.mark.parametrize(
    ("request_bytes", "reason"),
    [
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", b"Found multiple Host: headers"),
        (b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", b"Missing mandatory Host: header"),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            b"Only Transfer-Encoding: chunked is supported",
        ),
        # what llhttp refuses, with its own reason (uvicorn's 400 says only "invalid")
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"Transfer-Encoding can't be present with Content-Length",
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", b"Duplicate Content-Length"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"y" * MAX_HEAD_BYTES + b"\r\n\r\n", b"over 16384 bytes"),
    ],
)
async def test_a_request_that_cannot_be_served_gets_a_400_saying_why_and_is_closed(
    request_bytes: bytes, reason: bytes
) -> None:
    async with serving(echo_headers) as port:
        with deadline(10):
            response = await exchange(port, request_bytes)
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n"), response
    assert b"\r\n\r\nInvalid HTTP request received. " in response and response.endswith(reason)
    assert b"connection: close" in response


async def test_a_method_the_parser_does_not_know_reaches_the_app_under_its_own_name() -> None:
    seen: list[tuple[str, bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["method"], (await receive())["body"]))
        await send({"type": "http.response.start", "status": 405, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async with serving(app) as port:
        with deadline(10):
            brew = await exchange(port, b"\r\nBREW /pot HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nhot")
            lower = await exchange(port, b"get / HTTP/1.1\r\nHost: a\r\n\r\n")
            not_a_token = await exchange(port, b"BR(W / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert brew.startswith(b"HTTP/1.1 405 ") and lower.startswith(b"HTTP/1.1 405 ")
    assert seen == [("BREW", b"hot"), ("get", b"")]
    assert not_a_token.startswith(b"HTTP/1.1 400 ") and not_a_token.endswith(b"Invalid method encountered")


async def test_a_head_that_never_ends_is_refused_once_over_the_bound() -> None:
    piece = b"y" * 4096
    async with serving(echo_headers) as port:
        with deadline(10):
            # one header value, never finished: llhttp buffers it where no callback counts it
            response = await exchange(port, b"GET / HTTP/1.1\r\nHost: a\r\nX: ", *[piece] * 6, pause=0.05)
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n"), response[:200]
    assert response.endswith(b"over 16384 bytes")


async def test_a_head_just_within_the_bound_is_served() -> None:
    head = b"GET / HTTP/1.1\r\nHost: a\r\nX: "
    value = b"y" * (MAX_HEAD_BYTES - len(head) - 20)
    async with serving(echo_headers) as port:
        with deadline(10):
            response = await exchange(port, head, value[:9000], value[9000:] + b"\r\n\r\n", pause=0.05)
    assert response.startswith(b"HTTP/1.1 200 OK\r\n"), response[:200]


async def test_header_names_are_lowercased_and_values_lose_surrounding_whitespace() -> None:
    request = b"GET / HTTP/1.1\r\nHost: a\r\nMCP-Protocol-Version:  2026-07-28 \t\r\nX-Empty:\r\n\r\n"
    async with serving(echo_headers) as port:
        with deadline(10):
            response = await exchange(port, request)
    body = json.loads(response.partition(b"\r\n\r\n")[2])
    assert body == [["host", "a"], ["mcp-protocol-version", "2026-07-28"], ["x-empty", ""]]


async def test_a_late_request_on_a_kept_alive_connection_gets_408() -> None:
    async with serving(echo_headers, ConnectionLimits(header_timeout=0.5)) as port:
        with deadline(10):
            response = await exchange(port, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", b"GET / HTTP/1.1\r\n", pause=0.1)
    first, _, late = response.partition(b"HTTP/1.1 408 ")
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and late, response
    assert b"the request's headers did not arrive within 0.5 s (--header-timeout)" in late


async def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout() -> None:
    request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    keep_alive, apart = paced(0.6), paced(0.4)  # a loaded machine's turn may take more than their 0.2 s gap
    async with serving(echo_headers, keep_alive=keep_alive) as port:
        with deadline(10):
            async with await anyio.connect_tcp("127.0.0.1", port) as client:
                for _ in range(4):  # 0.4 s apart: past the timeout in all, within it after each answer
                    await client.send(request)
                    assert (await client.receive()).startswith(b"HTTP/1.1 200 OK\r\n")
                    await anyio.sleep(apart)
                began = anyio.current_time()
                with pytest.raises(anyio.EndOfStream):
                    await client.receive()
                idle = anyio.current_time() - began + apart
    assert keep_alive - 0.1 < idle < paced(1.5)  # the keep-alive, not the test's deadline


async def slow_first(scope: Any, receive: Any, send: Any) -> None:
    """`echo_headers`, 1.5 s late for the path /slow."""
    if scope["path"] == "/slow":
        await anyio.sleep(1.5)
    await echo_headers(scope, receive, send)


SLOW = b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"


async def test_the_body_deadline_waits_while_the_server_itself_stopped_reading() -> None:
    """A pipelined request waits unread while the one before it is served: its body is late by
    the server's doing, not the client's."""

    second = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n{}"
    async with serving(slow_first, ConnectionLimits(body_timeout=1)) as port:
        with deadline(10):
            response = await exchange(port, SLOW + second, b"{}", pause=1.2)
    assert response.count(b"HTTP/1.1 200 OK\r\n") == 2, response
    assert b"408" not in response


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


class Held:
    """A connection as the caps see it: shed() notes why."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.why: str | None = None

    def shed(self, why: str) -> None:
        self.why = why


def held(limits: ConnectionLimits, ip: str, tier: int, name: str) -> Held:
    assert limits.admit(ip) is None
    connection = Held(name)
    limits.wait(connection, ip, tier)
    return connection


def test_a_connection_over_the_per_ip_cap_takes_the_place_of_that_ips_oldest_waiting_one() -> None:
    limits = ConnectionLimits(overall=10, per_ip=2)
    oldest = held(limits, "10.0.0.1", connections.UNPROVEN, "oldest")
    newer = held(limits, "10.0.0.1", connections.UNPROVEN, "newer")
    other = held(limits, "10.0.0.2", connections.UNPROVEN, "other ip")  # older than none of 10.0.0.1's: kept
    assert limits.admit("10.0.0.1") is None
    assert oldest.why is not None and "--max-connections-per-ip" in oldest.why and "closed to make room" in oldest.why
    assert newer.why is None and other.why is None
    assert (limits.total, dict(limits.open)) == (3, {"10.0.0.1": 2, "10.0.0.2": 1})


def test_one_that_never_completed_a_request_goes_before_an_idle_one_then_the_oldest_idle() -> None:
    limits = ConnectionLimits(overall=3, per_ip=10)
    idle = held(limits, "10.0.0.1", connections.IDLE, "idle, the oldest")
    later_idle = held(limits, "10.0.0.3", connections.IDLE, "idle, later")
    unproven = held(limits, "10.0.0.2", connections.UNPROVEN, "never completed a request")
    assert limits.admit("10.0.0.4") is None  # the overall cap: anyone's
    assert unproven.why is not None and "--max-connections" in unproven.why
    assert idle.why is None
    assert limits.admit("10.0.0.4") is None
    assert idle.why is not None and "longest idle" in idle.why and later_idle.why is None
    assert (limits.total, dict(limits.open)) == (3, {"10.0.0.3": 1, "10.0.0.4": 2})


def test_a_connection_that_no_longer_waits_is_not_shed_and_nothing_waiting_means_a_refusal() -> None:
    limits = ConnectionLimits(overall=10, per_ip=1)
    answered = held(limits, "10.0.0.1", connections.UNPROVEN, "its request came whole")
    limits.unwait(answered, "10.0.0.1", connections.UNPROVEN)
    refusal = limits.admit("10.0.0.1")
    assert refusal is not None and "each being answered" in refusal and answered.why is None


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


async def test_empty_lines_after_a_response_do_not_keep_a_connection_open_past_every_deadline() -> None:
    """llhttp passes over empty lines before a request without beginning one: they must not
    stop the keep-alive timer while no header deadline runs (a connection held for ever)."""
    async with serving(echo_headers, ConnectionLimits(header_timeout=0.5), keep_alive=0.5) as port:
        with deadline(10):
            async with await anyio.connect_tcp("127.0.0.1", port) as client:
                await client.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
                assert (await client.receive()).startswith(b"HTTP/1.1 200 OK\r\n")
                await client.send(b"\r\n")
                began = anyio.current_time()
                with anyio.move_on_after(4), pytest.raises(anyio.EndOfStream):
                    while True:
                        await client.receive()
                waited = anyio.current_time() - began
    assert waited < 2, f"the connection was still open after {waited:.1f} s"


@pytest.mark.parametrize(
    "body",
    [b"zz\r\n", b"2\r\n{}xx\r\n"],
    ids=["chunk size", "chunk end"],
)
async def test_a_body_the_parser_refuses_gets_a_400_at_once_not_a_connection_held_open(body: bytes) -> None:
    """The request whose body is refused can never be answered: its 400 must not wait for it
    (nor may the connection stay open with no deadline running)."""
    head = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with serving(echo_headers, ConnectionLimits(body_timeout=60)) as port:
        with deadline(10):
            response = await exchange(port, head, body, pause=0.1)
    assert response.startswith(b"HTTP/1.1 400 Bad Request\r\n"), response


async def test_a_refused_body_is_answered_after_the_request_before_it() -> None:
    broken = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    async with serving(slow_first, ConnectionLimits(body_timeout=60)) as port:
        with deadline(10):
            response = await exchange(port, SLOW + broken)
    ok, _, refused = response.partition(b"HTTP/1.1 400 Bad Request\r\n")
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n") and refused, response


async def test_trailer_fields_do_not_join_the_request_headers() -> None:
    """A chunked body's trailer fields come after the guard read the headers: h11 dropped them,
    and so must the proxy (`Authorization` in a trailer is no header of the request)."""
    request = (
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\nAuthorization: Bearer x\r\nMcp-Method: tools/call\r\n\r\n"
    )
    async with serving(echo_headers) as port:
        with deadline(10):
            response = await exchange(port, request)
    body = json.loads(response.partition(b"\r\n\r\n")[2])
    assert body == [["host", "a"], ["transfer-encoding", "chunked"]]


async def test_the_header_deadline_of_a_pipelined_request_waits_for_the_answer_before_it() -> None:
    """A request's head that comes behind one still being answered is not late by the client's
    doing, and a 408 written then would read as the answer to the request before it."""
    async with serving(slow_first, ConnectionLimits(header_timeout=0.5)) as port:
        with deadline(10):
            response = await exchange(port, SLOW + b"GET / HTTP/1.1\r\n", b"Host: a\r\n\r\n", pause=1.8)
    assert response.count(b"HTTP/1.1 200 OK\r\n") == 2, response


async def method_and_body(scope: Any, receive: Any, send: Any) -> None:
    """An app answering 200 with the request's method, path and body, or 405 to a method it does
    not know (as the proxy's app does)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    status = 200 if scope["method"] in ("GET", "POST") else 405
    text = f"{scope['method']} {scope['path']} {body.decode()}".encode()
    headers = [(b"content-length", str(len(text)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text})


def statuses_and_bodies(received: bytes) -> list[tuple[bytes, bytes]]:
    """The status lines and bodies of the Content-Length responses in `received`, in order."""
    answers = []
    while received:
        head, _, rest = received.partition(b"\r\n\r\n")
        length = int(head.lower().partition(b"content-length: ")[2].partition(b"\r\n")[0])
        answers.append((head.partition(b"\r\n")[0], rest[:length]))
        received = rest[length:]
    return answers


async def test_a_method_the_parser_does_not_know_reaches_the_app_wherever_it_is_pipelined() -> None:
    """Pipelined in one read behind other requests (and before more), each unknown method is
    answered by the app, in order, as h11 did."""
    pipelined = (
        b"GET /a HTTP/1.1\r\nHost: a\r\n\r\n"
        b"BREW /pot HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nhot"
        b"POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        b"\r\nPROPFIND /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    async with serving(method_and_body) as port:
        with deadline(10):
            response = await exchange(port, pipelined)
    assert statuses_and_bodies(response) == [
        (b"HTTP/1.1 200 OK", b"GET /a "),
        (b"HTTP/1.1 405 Method Not Allowed", b"BREW /pot hot"),
        (b"HTTP/1.1 200 OK", b"POST /b hi"),
        (b"HTTP/1.1 405 Method Not Allowed", b"PROPFIND /c "),
    ]


async def test_connect_is_answered_405_naming_the_method_after_the_requests_before_it() -> None:
    async with serving(method_and_body) as port:
        with deadline(10):
            alone = await exchange(port, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            behind = await exchange(
                port, b"GET /a HTTP/1.1\r\nHost: a\r\n\r\nCONNECT example.com:443 HTTP/1.1\r\nHost: a\r\n\r\nhello"
            )
    assert alone.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n") and b"\r\nallow: \r\n" in alone
    assert b"connection: close" in alone
    assert json.loads(alone.partition(b"\r\n\r\n")[2]) == {
        "error": "method_not_allowed",
        "message": "CONNECT example.com:443: CONNECT is not served here (this is no forward proxy)",
    }
    first, second = statuses_and_bodies(behind)
    assert first == (b"HTTP/1.1 200 OK", b"GET /a ") and second[0] == b"HTTP/1.1 405 Method Not Allowed"


async def test_requests_pipelined_behind_an_upgrade_request_are_served() -> None:
    """No protocol is upgraded to: an `Upgrade:` request is served as it is, and the requests
    behind it in the same read are served too, as h11 did. One with a body is refused, saying why
    (llhttp ends it at its headers, so its body would be lost)."""
    upgrade = (
        b"GET /u HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
    )
    async with serving(method_and_body) as port:
        with deadline(10):
            served = await exchange(
                port,
                upgrade + b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n" + upgrade + b"BREW /x HTTP/1.1\r\nHost: a\r\n\r\n",
            )
            with_body = await exchange(
                port,
                b"POST /u HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}",
            )
    assert statuses_and_bodies(served) == [
        (b"HTTP/1.1 200 OK", b"GET /u "),
        (b"HTTP/1.1 200 OK", b"GET /next "),
        (b"HTTP/1.1 200 OK", b"GET /u "),
        (b"HTTP/1.1 405 Method Not Allowed", b"BREW /x "),
    ]
    assert with_body.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert with_body.endswith(b"a request with Upgrade and a body is not served; send it without Upgrade")


class _CountingParser(httptools.HttpRequestParser):
    """llhttp's parser, counting the bytes each parser made to find where a request begins is fed."""

    probed = 0

    def __init__(self, protocol: Any) -> None:
        super().__init__(protocol)
        self._probe = not isinstance(protocol, LimitedHttpToolsProtocol)

    def feed_data(self, data: Any) -> None:
        if self._probe:
            _CountingParser.probed += len(data)
        super().feed_data(data)


async def test_finding_where_each_unknown_method_begins_reads_a_few_bytes_around_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each request with a method llhttp does not know is looked for near where the request
    before it ended, not from the read's start: the bytes parsed again to find it stay within a
    small multiple of the read's, however many such requests one read packs (from the start,
    they grew as the square of their number: a crafted read held the event loop for seconds)."""
    monkeypatch.setattr(connections.httptools, "HttpRequestParser", _CountingParser)
    _CountingParser.probed = 0
    count = 200
    read = b"X / HTTP/1.1\r\nHost: a\r\n\r\n" * count
    async with serving(method_and_body) as port:
        with deadline(10):
            response = await exchange(port, read)
    assert statuses_and_bodies(response) == [(b"HTTP/1.1 405 Method Not Allowed", b"X / ")] * count
    assert 0 < _CountingParser.probed <= 16 * len(read)
