"""The HTTP guard's pieces without a socket: bind check, rate parsing, token buckets, Host names,
the body cap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Receive, Scope, Send

from frugal_proxy.identities import token_hash
from frugal_proxy.server.guard import (
    BodyTooLarge,
    Guard,
    GuardSettings,
    TokenBuckets,
    _host_name,
    bind_refusal,
    headers_of,
    is_loopback,
    media_type_refusal,
    operator_of,
    parse_rate,
    read_body,
    receive_body,
)
from frugal_proxy.server.operators import Operators

pytestmark = pytest.mark.anyio


def test_only_a_loopback_bind_goes_without_a_token() -> None:
    configured = Operators({"default": token_hash("token")})
    open_only = Operators(open_registration=True)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert is_loopback(host)
        assert bind_refusal(host, None, False) is None
        assert bind_refusal(host, open_only, False) is None
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.com"):
        refusal = bind_refusal(host, None, False)
        assert refusal is not None and "FRUGAL_AUTH_TOKEN" in refusal
        assert bind_refusal(host, configured, False) is None
        assert bind_refusal(host, None, True) is None
        # Open registration alone lets anyone mint a token: not protection enough.
        refusal = bind_refusal(host, open_only, False)
        assert refusal is not None and "open registration" in refusal
        assert bind_refusal(host, Operators({"default": token_hash("t")}, open_registration=True), False) is None


def test_rate_limits_parse() -> None:
    assert parse_rate("100/1000") == (100.0, 1000)
    assert parse_rate("0.5/3") == (0.5, 3)
    assert parse_rate("20") == (20.0, 20)
    for bad in ("fast", "10/x", "0/10", "10/0", "-1/5"):
        with pytest.raises(ValueError, match="rate-limit"):
            parse_rate(bad)


def test_token_bucket_refills_at_its_rate() -> None:
    buckets = TokenBuckets(rate=2.0, burst=3)
    assert [buckets.take("a", now=0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a", now=0.0) == pytest.approx(0.5)
    assert buckets.take("b", now=0.0) == 0.0  # another client has its own bucket
    assert buckets.take("a", now=0.5) == 0.0
    assert buckets.take("a", now=0.5) > 0


def test_host_names_lose_their_port() -> None:
    assert _host_name("localhost:8765") == "localhost"
    assert _host_name("[::1]:8765") == "::1"
    assert _host_name("Sidecar") == "sidecar"
    assert _host_name("127.0.0.1") == "127.0.0.1"


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_the_body_cap_is_checked_as_chunks_arrive() -> None:
    assert await read_body(_chunks(b"ab", b"cd"), None, 4) == b"abcd"
    with pytest.raises(BodyTooLarge):
        await read_body(_chunks(b"ab", b"cde"), None, 4)
    with pytest.raises(BodyTooLarge):
        await read_body(_chunks(), "5", 4)  # refused on the declared length, before reading


def _receiving(*messages: dict[str, Any]) -> Receive:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


async def test_the_body_cap_is_checked_as_asgi_messages_arrive() -> None:
    one = {"type": "http.request", "body": b"abcd"}
    assert await receive_body(_receiving(one), "4", 4) == b"abcd"
    first, last = {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"cd"}
    assert await receive_body(_receiving(first, {**first, "body": b""}, last), None, 4) == b"abcd"
    with pytest.raises(BodyTooLarge):
        await receive_body(_receiving(first, {**last, "body": b"cde"}), None, 4)
    with pytest.raises(BodyTooLarge):
        await receive_body(_receiving({"type": "http.request", "body": b"abcde"}), None, 4)
    with pytest.raises(BodyTooLarge):
        await receive_body(_receiving(), "5", 4)  # refused on the declared length, before reading
    with pytest.raises(ClientDisconnect):
        await receive_body(_receiving(first, {"type": "http.disconnect"}), None, 4)


async def test_the_guard_hands_each_request_its_operator_in_the_scope(tmp_path: Path) -> None:
    """No context variable: the operator travels with the request's own scope, so two requests
    served at once each see their own."""
    operators = Operators({"alice": token_hash("t-alice"), "bob": token_hash("t-bob")}, path=tmp_path / "ops.json")
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(operator_of(Request(scope)))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = Guard(app, GuardSettings(operators=operators))
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    def scope(token: str | None) -> Scope:
        headers = [(b"host", b"127.0.0.1:8765")]
        if token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "client": ("127.0.0.1", 1)}

    async with anyio.create_task_group() as tg:
        tg.start_soon(guard, scope("t-alice"), receive, send)
        tg.start_soon(guard, scope("t-bob"), receive, send)
    assert sorted(seen) == ["alice", "bob"]
    await guard(scope(None), receive, send)
    assert sent[-2]["status"] == 401 and len(seen) == 2
    open_guard = Guard(app, GuardSettings())
    await open_guard(scope(None), receive, send)
    assert seen[-1] == "local"


async def test_the_headers_the_guard_read_reach_the_handler_as_starlette_would_read_them() -> None:
    """Read once by the guard, handed on in the scope: the first copy of a header that may repeat,
    as starlette's own Headers give it; the media-type checks read them from there."""
    seen: list[tuple[dict[str, str], int | None]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        refusal = media_type_refusal(request)
        seen.append((dict(headers_of(request)), None if refusal is None else refusal.status_code))
        assert headers_of(request).get("accept") == request.headers.get("accept")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        pass

    def scope(*accept: bytes) -> Scope:
        headers = [(b"host", b"127.0.0.1:8765"), (b"content-type", b"application/json")]
        headers += [(b"accept", value) for value in accept]
        return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "client": ("127.0.0.1", 1)}

    guard = Guard(app, GuardSettings(rate=None))
    for _ in range(2):  # the second time from what the first found acceptable
        await guard(scope(b"application/json, text/event-stream", b"text/html"), receive, send)
        await guard(scope(b"text/html", b"application/json"), receive, send)
    assert [(headers["accept"], status) for headers, status in seen] == [
        ("application/json, text/event-stream", None),
        ("text/html", 406),
    ] * 2


async def test_any_host_passes_where_a_token_guards_a_non_loopback_bind(tmp_path: Path) -> None:
    operators = Operators({"alice": token_hash("t")}, path=tmp_path / "ops.json")
    statuses: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    def scope(host: bytes, origin: bytes | None = None) -> Scope:
        headers = [(b"host", host), (b"authorization", b"Bearer t")]
        if origin is not None:
            headers.append((b"origin", origin))
        return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "client": ("10.0.0.9", 1)}

    strict = Guard(app, GuardSettings(operators=operators))
    sidecar = Guard(app, GuardSettings(operators=operators, any_host=True))
    await strict(scope(b"frugal-proxy:8765"), receive, send)
    await sidecar(scope(b"frugal-proxy:8765"), receive, send)
    await sidecar(scope(b"frugal-proxy:8765", origin=b"https://evil.example"), receive, send)
    assert statuses == [403, 204, 403]  # the Origin check stays
