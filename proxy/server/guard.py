"""What stands in front of the HTTP endpoint: the bind check, bearer auth, DNS-rebinding
protection (Host and Origin), a per-client-IP token bucket, the refusal of duplicated headers
that decide who a request is and where it goes, the POST media-type checks and the request body
cap. (The connection caps and read deadlines sit below, in connections.)

`Guard` is plain ASGI middleware; `read_body` and `receive_body` enforce the cap while the body
arrives. Bearer auth maps a request's token to its operator (server.operators) and puts it in
the request's ASGI scope, where `operator_of` reads it. Refusals are JSON:
`{"error": CODE, "message": …}`. Nothing here logs a token, a header value or a payload.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from frugal_proxy.identities import LOCAL, TOKEN_ENV
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.headers import accept_weights
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.server.connections import TRUST_HOOK
from frugal_proxy.server.operators import Operators

log = logging.getLogger("frugal_proxy.http_guard")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_BODY_CAP = 4 * 1024 * 1024
HEALTH_PATH = "/healthz"
REGISTER_PATH = "/register"
OPEN_PATHS = frozenset({HEALTH_PATH, REGISTER_PATH})  # reached without a token
OPERATOR_KEY = "frugal.operator"  # the ASGI scope key the guard puts a request's operator under


HEADERS_KEY = "frugal.headers"  # the ASGI scope key of the headers the guard has read


def operator_of(request: Request) -> str:
    """The operator a request acts for (its bearer token's; `local` without auth)."""
    operator = request.scope.get(OPERATOR_KEY)
    return operator if isinstance(operator, str) else LOCAL


def headers_of(request: Request) -> Mapping[str, str]:
    """A request's headers by lowercased name, the first copy of each: as the guard decoded
    them once (starlette's otherwise, which reads them the same way)."""
    headers = request.scope.get(HEADERS_KEY)
    return headers if isinstance(headers, dict) else request.headers


MAX_BUCKETS = 10_000
MAX_HOSTS_SEEN = 256  # Host header values whose verdict the guard remembers
DEFAULT_RATE, DEFAULT_BURST = 100.0, 1000
# Headers whose second copy a proxy, a framework and an upstream could each resolve differently
# (first wins, last wins, joined): who the request is, where it comes from and goes, what it is.
SINGLE_HEADERS = frozenset({"authorization", "origin", "host", "content-type"})


class BodyTooLarge(Exception):
    """The request body is over the cap."""


def is_loopback(host: str) -> bool:
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def bind_refusal(host: str, operators: Operators | None, allow_unauthenticated: bool) -> str | None:
    """Why binding `host` must not happen, or None when it may."""
    if is_loopback(host) or allow_unauthenticated:
        return None
    why = operators.bind_refusal() if operators is not None else f"no token is configured (set {TOKEN_ENV})"
    if why is None:
        return None
    return (
        f"refusing to listen on {host} without authentication: {why}. Set {TOKEN_ENV} or "
        "[auth.operators] (clients then send 'Authorization: Bearer <token>'), bind 127.0.0.1, "
        "or pass --allow-unauthenticated to accept anyone who can reach the port"
    )


def parse_rate(text: str) -> tuple[float, int]:
    """`RPS/BURST` (for example `100/1000`) as numbers; ValueError when it is not that."""
    rate, sep, burst = text.partition("/")
    try:
        rps, size = float(rate), int(burst) if sep else max(1, math.ceil(float(rate)))
    except ValueError:
        raise ValueError(f"--rate-limit wants RPS/BURST (for example 100/1000), got {text!r}") from None
    if rps <= 0 or size < 1:
        raise ValueError(f"--rate-limit wants a positive rate and a burst of at least 1, got {text!r}")
    return rps, size


@dataclass
class GuardSettings:
    operators: Operators | None = None  # None: no bearer auth; every client is the operator `local`
    allowed_hosts: frozenset[str] = frozenset()
    # A non-loopback bind that requires a bearer token: DNS rebinding needs a loopback or an
    # unauthenticated target, so the Host check protects nothing the token does not; any Host
    # passes (a sidecar reached by its compose service name), the Origin check stays.
    any_host: bool = False
    allowed_origins: frozenset[str] = frozenset()
    rate: float | None = DEFAULT_RATE  # None: no per-client-IP limit (a loopback bind's default)
    burst: int = DEFAULT_BURST
    body_cap: int = DEFAULT_BODY_CAP


@dataclass
class TokenBuckets:
    """One token bucket per client address."""

    rate: float
    burst: int
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, client: str, now: float | None = None) -> float:
        """0 when the client may go ahead, else the seconds until it may."""
        now = time.monotonic() if now is None else now
        tokens, last = self._buckets.get(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[client] = (tokens, now)
            return (1.0 - tokens) / self.rate
        if len(self._buckets) >= MAX_BUCKETS and client not in self._buckets:
            self._forget_full(now)
        self._buckets[client] = (tokens - 1.0, now)
        return 0.0

    def _forget_full(self, now: float) -> None:
        full_after = self.burst / self.rate
        self._buckets = {key: value for key, value in self._buckets.items() if now - value[1] < full_after}


class Guard:
    """ASGI middleware: rate limit, Host, Origin, then bearer auth (every path but /healthz and
    /register), which names the request's operator."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings
        self.hosts = LOOPBACK_NAMES | {host.lower() for host in settings.allowed_hosts}
        self.origins = {origin.lower().rstrip("/") for origin in settings.allowed_origins}
        self.buckets = TokenBuckets(settings.rate, settings.burst) if settings.rate is not None else None
        self._hosts_seen: dict[str, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        wait = self.buckets.take(client[0] if client else "?") if self.buckets is not None else 0.0
        if wait > 0:
            retry = max(1, math.ceil(wait))
            message = (
                f"over the rate limit of {self.settings.rate:g} requests/s per client IP (burst "
                f"{self.settings.burst}); retry after {retry} s, or raise it with --rate-limit RPS/BURST"
            )
            log.warning("request over the rate limit refused", extra={"status": 429})
            await _refuse(send, 429, "rate_limited", message, {"Retry-After": str(retry)})
            return
        raw_headers = scope["headers"]
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in raw_headers}
        if len(headers) != len(raw_headers):  # a name sent twice: read again, the first copy kept
            headers = {}
            for raw_key, raw_value in raw_headers:
                key = raw_key.decode("latin-1")
                if key in headers:
                    if key in SINGLE_HEADERS or key.startswith("mcp-"):
                        log.warning("request with a duplicated header refused", extra={"status": 400, "header": key})
                        message = f"the {key} header is sent more than once; send it once"
                        await _refuse(send, 400, "duplicate_header", message)
                        return
                    continue  # of any other header the first copy is read, as starlette reads it
                headers[key] = raw_value.decode("latin-1")
        if not self.settings.any_host and not self._host_allowed(headers.get("host", "")):
            log.warning("request with a Host that is not allowed refused", extra={"status": 403})
            await _refuse(send, 403, "host_not_allowed", "Host not allowed (add it with --allowed-host)")
            return
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            log.warning("request from a browser Origin that is not allowed refused", extra={"status": 403})
            await _refuse(send, 403, "origin_not_allowed", "Origin not allowed (add it with --allowed-origin)")
            return
        operator = LOCAL
        operators = self.settings.operators
        if operators is not None and operators.required and scope["path"] not in OPEN_PATHS:
            found = await operators.identify(headers.get("authorization", ""))
            if found is None:
                log.warning("request without a valid bearer token refused", extra={"status": 401})
                message = "missing or wrong bearer token: send 'Authorization: Bearer <token>'"
                await _refuse(send, 401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})
                return
            operator = found
            extensions = scope.get("extensions")
            trust = extensions.get(TRUST_HOOK) if extensions else None
            if trust is not None:
                trust()  # the connection showed a valid token: it is never shed to make room
        # The operator travels with the request, in its scope; handlers read it with operator_of,
        # and the headers as read here with headers_of.
        await self.app({**scope, OPERATOR_KEY: operator, HEADERS_KEY: headers}, receive, send)

    def _host_allowed(self, host: str) -> bool:
        """Whether a Host header's name is allowed (each value read once: clients send the same
        one or two every time, and a bounded number are remembered)."""
        allowed = self._hosts_seen.get(host)
        if allowed is None:
            allowed = _host_name(host) in self.hosts
            if len(self._hosts_seen) < MAX_HOSTS_SEEN:
                self._hosts_seen[host] = allowed
        return allowed

    def _origin_allowed(self, origin: str) -> bool:
        if origin.lower().rstrip("/") in self.origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and is_loopback(parts.hostname or "")


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _refuse(send: Send, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": code, "message": message}).encode()
    raw: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw.extend((key.lower().encode(), value.encode()) for key, value in (headers or {}).items())
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def read_body(chunks: AsyncIterator[bytes], declared: str | None, cap: int) -> bytes:
    """The whole body, refused (BodyTooLarge) as soon as it is known to be over the cap."""
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > cap:
            raise BodyTooLarge
    return bytes(body)


async def receive_body(receive: Receive, declared: str | None, cap: int) -> bytes:
    """`read_body` straight from ASGI's `receive` (what starlette's `Request.stream()` reads,
    without its generator): a body that comes in one message is returned as it came.
    ClientDisconnect when the client leaves first."""
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise BodyTooLarge
    message = await receive()
    parts: bytearray | None = None
    while True:
        if message["type"] != "http.request":
            raise ClientDisconnect
        chunk: bytes = message.get("body", b"")
        if parts is not None:
            parts += chunk
        if len(chunk if parts is None else parts) > cap:
            raise BodyTooLarge
        if not message.get("more_body", False):
            return chunk if parts is None else bytes(parts)
        if parts is None:
            parts = bytearray(chunk)
        message = await receive()


def media_type_refusal(request: Request) -> Response | None:
    """415 for a POST whose Content-Type is not JSON, 406 for a request whose Accept rules out
    both JSON and an SSE stream (GET: an SSE stream); None when it may go on.

    Lenient on purpose: a missing Content-Type or Accept passes (raw clients and tools posting
    bytes send neither, and the body is checked as JSON-RPC anyway), and an Accept naming only
    one of the two types passes (some hosted clients send only `text/event-stream`; the SDKs
    have relaxed their own check to "either" for that reason)."""
    headers = headers_of(request)
    sent_type = headers.get("content-type")
    accept = headers.get("accept")
    seen = (request.method, sent_type, accept)
    if seen in _ACCEPTABLE:
        return None
    refusal = _media_type_refusal(request.method, sent_type, accept)
    if refusal is None and len(_ACCEPTABLE) < MAX_ACCEPTABLE:
        _ACCEPTABLE.add(seen)  # clients send the same few pairs each time: each is read once
    return refusal


MAX_ACCEPTABLE = 256
_ACCEPTABLE: set[tuple[str, str | None, str | None]] = set()


def _media_type_refusal(method: str, sent_type: str | None, accept: str | None) -> Response | None:
    if method == "POST" and sent_type is not None:
        media = sent_type.split(";", 1)[0].strip().lower()
        if media != "application/json":
            message = f"Content-Type must be application/json, got {sent_type[:100]!r}"
            log.warning("POST with a Content-Type that is not JSON refused", extra={"status": 415})
            return _json_refusal(415, message)
    if accept is None:
        return None
    accepted = {media for media, weight in accept_weights(accept) if weight > 0}
    json_ok = bool(accepted & {"*/*", "application/*", "application/json"})
    sse_ok = bool(accepted & {"*/*", "text/*", "text/event-stream"})
    if method == "POST" and not (json_ok or sse_ok):
        message = f"Accept must allow application/json or text/event-stream, got {accept[:100]!r}"
    elif method == "GET" and not sse_ok:
        message = f"Accept must allow text/event-stream for the GET stream, got {accept[:100]!r}"
    else:
        return None
    log.warning("request whose Accept rules out every answer refused", extra={"status": 406})
    return _json_refusal(406, message)


def _json_refusal(status: int, message: str) -> Response:
    refusal = jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message)
    return Response(jsonrpc.encode(refusal), status, media_type="application/json")


async def read_messages(request: Request, cap: int) -> tuple[list[Frame], bool] | Response:
    """A POST's JSON-RPC messages (and whether they came as a batch), each checked for shape;
    or the answer to give instead: 413 over the body cap, 400 for what is not JSON-RPC."""
    try:
        body = await receive_body(request.receive, headers_of(request).get("content-length"), cap)
    except BodyTooLarge:
        message = f"request body over the {cap}-byte limit"
        refusal = jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message)
        return Response(jsonrpc.encode(refusal), 413, media_type="application/json")
    except ClientDisconnect:
        return Response(status_code=400)
    try:
        frames, batch = jsonrpc.read_line(body)  # checked from the limits check's own decode
    except jsonrpc.MessageError as exc:
        refusal = jsonrpc.error(exc.request_id, exc.code, str(exc))
        elements = jsonrpc.split_batch(body) if exc.code != jsonrpc.PARSE_ERROR else None
        if elements is not None:
            return RefusedBatch(elements, jsonrpc.encode(refusal))
        return Response(jsonrpc.encode(refusal), 400, media_type="application/json")
    return frames, batch


class RefusedBatch(Response):
    """The 400 refusing a batch whole, holding it element by element (each a frame or the error
    answering it alone) for an endpoint whose revision (2025-03-26) answers batches that way."""

    def __init__(self, elements: list[Frame | jsonrpc.MessageError], body: bytes) -> None:
        super().__init__(body, 400, media_type="application/json")
        self.elements = elements


def guard_settings(options: Any, operators: Operators | None, *, loopback: bool = False) -> GuardSettings:
    """GuardSettings from the parsed `--allowed-host`, `--allowed-origin`, `--rate-limit` and
    `--max-body-bytes` options. Unless `--rate-limit` is given, a loopback bind has no per-IP
    rate limit: every local client is 127.0.0.1, so one bucket would throttle them all together
    (50 local clients lost 77 % of their calls at 100/s), and nobody else can reach the port."""
    rate: float | None
    if options.rate_limit is None:
        rate, burst = (None, DEFAULT_BURST) if loopback else (DEFAULT_RATE, DEFAULT_BURST)
    else:
        rate, burst = parse_rate(options.rate_limit)
    return GuardSettings(
        operators=operators,
        allowed_hosts=frozenset(options.allowed_host),
        allowed_origins=frozenset(options.allowed_origin),
        rate=rate,
        burst=burst,
        body_cap=options.max_body_bytes,
    )
