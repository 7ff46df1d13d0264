"""The downstream Streamable HTTP endpoint (starlette + uvicorn): `/mcp` and `/healthz`.

    POST, 2026-07-28 (`MCP-Protocol-Version` header, `_meta` in the body)
        served statelessly by the one shared Session; headers checked against the body; JSON,
        or an SSE stream of the request's progress and then its reply when it asked for
        progress; closing that stream cancels the call
    POST initialize (session era)
        a new Session with upstream connections of its own (http_sessions), `Mcp-Session-Id`
    POST / GET / DELETE with `Mcp-Session-Id`
        that session's requests, replies and notifications / its standalone stream / its end
    --stateless
        no sessions: every request is served by the shared Session, GET and DELETE get 405

Hardening sits in front of all of it (http_guard).
"""

from __future__ import annotations

import itertools
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from frugal_proxy import eras, jsonrpc
from frugal_proxy.downstream import DownstreamPeer
from frugal_proxy.http_guard import HEALTH_PATH, BodyTooLarge, Guard, GuardSettings, read_body
from frugal_proxy.http_sessions import HttpSession, HttpSessions, UpstreamSet
from frugal_proxy.jsonrpc import Frame
from frugal_proxy.serve import _run_upstream
from frugal_proxy.session import REQUEST_STREAM, Session
from frugal_proxy.upstream_base import UpstreamBase

log = logging.getLogger("frugal_proxy.http_server")

SESSION_HEADER = "mcp-session-id"
NAME_KEYS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
STATUS_OF = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.HEADER_MISMATCH: 400,
    jsonrpc.MISSING_CLIENT_CAPABILITY: 400,
    jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}
STREAM_BUFFER = 256
DRAIN_SECONDS = 5.0


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    path: str = "/mcp"
    stateless: bool = False
    idle_timeout: float = 1800.0
    max_sessions: int = 100
    guard: GuardSettings = field(default_factory=GuardSettings)


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `PORT` (on 127.0.0.1); ValueError otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--http wants HOST:PORT (for example 127.0.0.1:8765), got {text!r}")
    return host, int(port)


def _rpc_error(status: int, code: int, message: str, ident: Any = None, data: Any = None) -> Response:
    return _frame_response(jsonrpc.error(ident, code, message, data), status)


def _frame_response(frame: Frame, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(jsonrpc.encode(frame), status, headers, media_type="application/json")


def _reply_response(reply: Frame, headers: dict[str, str] | None = None, *, modern: bool = False) -> Response:
    """A reply as JSON; a 2026-07-28 error gets the spec's HTTP status (in the session era a 404
    would mean the session is gone, so every reply there is a 200)."""
    problem = jsonrpc.error_of(reply) if modern else None
    return _frame_response(reply, STATUS_OF.get(problem[0], 200) if problem else 200, headers)


def _streaming(response: Response) -> None:
    """Drop the Content-Length starlette sets for an empty body: an event stream has none."""
    response.raw_headers = [(key, value) for key, value in response.raw_headers if key != b"content-length"]


def _sse(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


def _header_value(value: str) -> str:
    """A header value, decoded from `=?base64?…?=` when it is sent that way."""
    if value.startswith("=?base64?") and value.endswith("?="):
        import base64
        import binascii

        try:
            return base64.b64decode(value[9:-2], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return value
    return value


class ReplyStream(Response):
    """An SSE response scoped to one request: its notifications (progress), then its reply."""

    def __init__(
        self,
        answer: Callable[[], Awaitable[Frame | None]],
        *,
        cancel_on_disconnect: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(media_type="text/event-stream", headers={"Cache-Control": "no-store", **(headers or {})})
        _streaming(self)
        self.answer = answer
        self.cancel_on_disconnect = cancel_on_disconnect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tx, rx = anyio.create_memory_object_stream[bytes](STREAM_BUFFER)

        async def push(frame: Frame) -> None:
            try:
                tx.send_nowait(jsonrpc.encode(frame))
            except anyio.WouldBlock:
                log.info("a slow client's progress notification was dropped")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

        async def produce() -> None:
            with tx:
                REQUEST_STREAM.set(push)
                reply = await self.answer()
                if reply is not None:
                    await tx.send(jsonrpc.encode(reply))

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            log.info("client closed a request's stream; the call is cancelled")
            tg.cancel_scope.cancel()

        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        connected = True
        async with anyio.create_task_group() as tg, rx:
            tg.start_soon(produce)
            if self.cancel_on_disconnect:
                tg.start_soon(watch)
            async for data in rx:
                if not connected:
                    continue  # session era: a disconnect is not a cancellation; let the call finish
                try:
                    await send({"type": "http.response.body", "body": _sse(data), "more_body": True})
                except OSError:
                    connected = False
            if connected:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


class EventStream(Response):
    """A session's standalone GET stream: what the proxy sends the client unasked."""

    def __init__(self, entry: HttpSession) -> None:
        super().__init__(media_type="text/event-stream", headers={"Cache-Control": "no-store"})
        _streaming(self)
        self.entry = entry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry = self.entry
        entry.streaming = True
        entry.busy += 1
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                with entry.outbox.receive.clone() as messages:
                    await send({"type": "http.response.body", "body": b": stream open\n\n", "more_body": True})
                    async for data in messages:
                        await send({"type": "http.response.body", "body": _sse(data), "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        except OSError:
            pass
        finally:
            entry.streaming = False
            entry.busy -= 1
            entry.touch()


class Endpoint:
    """The MCP endpoint's request handling, era by era."""

    def __init__(self, shared: Session, sessions: HttpSessions | None, settings: HttpSettings) -> None:
        self.shared = shared
        self.sessions = sessions
        self.settings = settings
        self._ids = itertools.count(1)

    async def handle(self, request: Request) -> Response:
        version = request.headers.get("mcp-protocol-version")
        modern = version is not None and version not in eras.HANDSHAKE_VERSIONS
        if request.method != "POST":
            if modern or self.sessions is None:
                return Response(status_code=405, headers={"Allow": "POST"})
            return await self._session_get_or_delete(request)
        try:
            body = await read_body(
                request.stream(), request.headers.get("content-length"), self.settings.guard.body_cap
            )
        except BodyTooLarge:
            cap = self.settings.guard.body_cap
            return _rpc_error(413, jsonrpc.INVALID_REQUEST, f"request body over the {cap}-byte limit")
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            frames, batch = jsonrpc.decode_frames(body)
            if batch:
                raise jsonrpc.MessageError(jsonrpc.INVALID_REQUEST, "batches are not supported over HTTP")
            frame = frames[0]
            jsonrpc.check_frame(frame)
        except jsonrpc.MessageError as exc:
            return _rpc_error(400, exc.code, str(exc), exc.request_id)
        method = jsonrpc.method_of(frame)
        if method == "initialize" and not modern:
            return await self._initialize(frame)
        if modern or eras.modern_meta(jsonrpc.params_of(frame)) is not None:
            return await self._modern(request, frame, version)
        if self.sessions is None:
            return await self._take(self.shared, frame, request, modern=False)
        entry = self._session_of(request)
        if isinstance(entry, Response):
            return entry
        entry.touch()
        return await self._take(entry.session, frame, request, modern=False, entry=entry)

    # -- 2026-07-28 ----------------------------------------------------------------------------------

    async def _modern(self, request: Request, frame: Frame, version: str | None) -> Response:
        ident = jsonrpc.id_of(frame)
        if jsonrpc.is_reply(frame):
            return _rpc_error(400, jsonrpc.INVALID_REQUEST, "2026-07-28 clients do not POST responses")
        if jsonrpc.is_notification(frame):
            return Response(status_code=202)  # over HTTP the core protocol has no client notifications
        method = jsonrpc.method_of(frame) or ""
        params = jsonrpc.params_of(frame)
        meta = eras.modern_meta(params) or {}
        stated = jsonrpc.decode_any(meta[eras.META_VERSION]) if eras.META_VERSION in meta else None
        if version != stated:
            return _rpc_error(
                400,
                jsonrpc.HEADER_MISMATCH,
                f"MCP-Protocol-Version header {version!r} does not match _meta[{eras.META_VERSION!r}] {stated!r}",
                ident,
            )
        if version not in eras.MODERN_VERSIONS:
            unsupported = eras.UnsupportedVersion(ident or 0, str(version))
            return _rpc_error(400, unsupported.code, str(unsupported), ident, unsupported.data())
        if _header_value(request.headers.get("mcp-method", "")) != method:
            return _rpc_error(
                400, jsonrpc.HEADER_MISMATCH, f"Mcp-Method header does not match method {method!r}", ident
            )
        key = NAME_KEYS.get(method)
        if key is not None:
            named = jsonrpc.decode_any(params[key]) if key in params else None
            if _header_value(request.headers.get("mcp-name", "")) != named:
                return _rpc_error(400, jsonrpc.HEADER_MISMATCH, f"Mcp-Name header does not match params.{key}", ident)
        if method == "subscriptions/listen":
            message = "subscriptions/listen is not available over HTTP in this version of frugal-proxy"
            return _rpc_error(404, jsonrpc.METHOD_NOT_FOUND, message, ident)
        # Clients number their requests independently; the shared Session sees unique ids.
        inner = jsonrpc.with_id(frame, f"http-{next(self._ids)}")
        return await self._request(self.shared, inner, ident, modern=True)

    # -- the session era -----------------------------------------------------------------------------

    async def _initialize(self, frame: Frame) -> Response:
        if self.sessions is None:
            return await self._request(self.shared, frame, jsonrpc.id_of(frame), modern=False)
        if len(self.sessions) >= self.settings.max_sessions:
            message = f"too many sessions ({self.settings.max_sessions}); end one with DELETE or try later"
            return _rpc_error(503, jsonrpc.INTERNAL_ERROR, message, jsonrpc.id_of(frame))
        entry = await self.sessions.open()
        entry.busy += 1
        try:
            reply = await entry.session.reply_to(frame)
        finally:
            entry.busy -= 1
            entry.touch()
        if reply is None or jsonrpc.error_of(reply) is not None:
            self.sessions.end(entry.id)
            failed = reply or jsonrpc.error(jsonrpc.id_of(frame), jsonrpc.INTERNAL_ERROR, "initialize was cancelled")
            return _reply_response(failed)
        log.info("session started", extra={"sessions": len(self.sessions)})
        return _reply_response(reply, {"Mcp-Session-Id": entry.id})

    def _session_of(self, request: Request) -> HttpSession | Response:
        """The session a request names, or the answer to give when it names none that lives."""
        assert self.sessions is not None
        session_id = request.headers.get(SESSION_HEADER)
        if session_id is None:
            return _rpc_error(400, jsonrpc.INVALID_REQUEST, "missing Mcp-Session-Id: initialize first")
        entry = self.sessions.get(session_id)
        if entry is None:
            return _rpc_error(404, jsonrpc.INVALID_REQUEST, "unknown or ended session: initialize again")
        return entry

    async def _session_get_or_delete(self, request: Request) -> Response:
        entry = self._session_of(request)
        if isinstance(entry, Response):
            return entry
        assert self.sessions is not None
        if request.method == "DELETE":
            self.sessions.end(entry.id)
            log.info("session ended by the client")
            return Response(status_code=200)
        if entry.streaming:
            return _rpc_error(409, jsonrpc.INVALID_REQUEST, "this session's GET stream is already open")
        return EventStream(entry)

    async def _take(
        self, session: Session, frame: Frame, request: Request, *, modern: bool, entry: HttpSession | None = None
    ) -> Response:
        if jsonrpc.is_request(frame):
            return await self._request(session, frame, jsonrpc.id_of(frame), modern=modern, entry=entry)
        await session.take_in(frame)
        return Response(status_code=202)

    async def _request(
        self, session: Session, frame: Frame, ident: Any, *, modern: bool, entry: HttpSession | None = None
    ) -> Response:
        async def answer() -> Frame | None:
            if entry is not None:
                entry.busy += 1  # a session with a call in flight never expires
            try:
                reply = await session.reply_to(frame)
            finally:
                if entry is not None:
                    entry.busy -= 1
                    entry.touch()
            return None if reply is None else jsonrpc.with_id(reply, ident)

        if "progressToken" in jsonrpc.sub_object(jsonrpc.params_of(frame), "_meta"):
            return ReplyStream(answer, cancel_on_disconnect=modern)
        reply = await answer()
        if reply is None:
            return _rpc_error(503, jsonrpc.INTERNAL_ERROR, "the request was cancelled", ident)
        return _reply_response(reply, modern=modern)

    # -- health ----------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        upstreams = {link.name: "up" if link.upstream.running else "down" for link in self.shared.links}
        return JSONResponse({"status": "ok", "upstreams": upstreams})


def build_app(endpoint: Endpoint, settings: HttpSettings) -> Guard:
    """The ASGI application: the guard in front of the MCP endpoint and /healthz."""
    app = Starlette(
        routes=[
            Route(settings.path, endpoint.handle, methods=["POST", "GET", "DELETE"]),
            Route(HEALTH_PATH, endpoint.health, methods=["GET"]),
        ]
    )
    return Guard(app, settings.guard)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: serve_http stops it (and drains) itself."""

    def capture_signals(self) -> Any:
        import contextlib

        return contextlib.nullcontext()


class _NoClient:
    """The shared Session's client side: nothing reaches a stateless client unasked."""

    async def send(self, frame: Frame | list[Frame]) -> None:
        raise anyio.ClosedResourceError


async def serve_http(
    upstreams: UpstreamSet,
    settings: HttpSettings,
    sock: socket.socket,
    *,
    ready: Callable[[list[UpstreamBase]], Awaitable[str | None]] | None = None,
) -> int:
    """Serve the endpoint on a bound, listening socket until a signal; then drain and stop.
    `ready` may refuse to go on once the upstreams are started (a message; the exit status is 2)."""
    connections: list[UpstreamBase] = upstreams.make()
    async with anyio.create_task_group() as tg:
        for upstream in connections:
            await tg.start(_run_upstream, upstream, upstream.name in upstreams.lazy)
        if ready is not None:
            problem = await ready(connections)
            if problem is not None:
                print(f"frugal-proxy: {problem}", file=sys.stderr)
                tg.cancel_scope.cancel()
                return 2
        shared = Session(connections, DownstreamPeer(_NoClient()), tg, **upstreams.options)
        sessions = None
        if not settings.stateless:
            sessions = HttpSessions(
                tg, upstreams, idle_timeout=settings.idle_timeout, max_sessions=settings.max_sessions
            )
            tg.start_soon(sessions.expire_idle)
        endpoint = Endpoint(shared, sessions, settings)
        config = uvicorn.Config(
            build_app(endpoint, settings),
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=int(DRAIN_SECONDS),
        )
        server = _Server(config)

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
                async for received in signals:
                    log.info("stopping on signal; draining calls in flight", extra={"signal": received})
                    server.should_exit = True
                    if sessions is not None:
                        sessions.close_streams()  # open GET streams would hold the drain
                    return

        tg.start_soon(stop_on_signal)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"frugal-proxy: listening on http://{shown}:{port}{settings.path}", file=sys.stderr, flush=True)
        await server.serve(sockets=[sock])
        if sessions is not None:
            with anyio.move_on_after(DRAIN_SECONDS + 5):
                await sessions.end_all()
        with anyio.CancelScope(shield=True):
            for upstream in connections:
                await upstream.shutdown()
        tg.cancel_scope.cancel()
    return 0


def listen_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (IPv6 when the host is an IPv6 address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(256)
    except OSError:
        sock.close()
        raise
    return sock
