"""The downstream Streamable HTTP endpoint (starlette + uvicorn): `/mcp`, `/healthz`, `/metrics`,
the governor's routes (governor_http) and the 2024-11-05 HTTP+SSE pair (http_legacy_sse).

    POST, 2026-07-28 (`MCP-Protocol-Version` header, `_meta` in the body)
        served statelessly by the one shared Router; headers (`Mcp-Method`, `Mcp-Name`,
        `Mcp-Param-*`) checked against the body; JSON, or an SSE stream of the request's
        progress and then its reply when it asked for progress (a `subscriptions/listen`
        stream for as long as the client holds it); closing that stream cancels the call
    POST initialize (session era)
        a new Router with upstream connections of its own (http_sessions), `Mcp-Session-Id`
    POST / GET / DELETE with `Mcp-Session-Id`
        that session's requests (2025-03-26 batches too), replies and notifications / its
        standalone stream, or a stream resumed with `Last-Event-ID` (http_events) / its end
    --stateless
        no sessions: every request is served by the shared Router, GET and DELETE get 405

Every request is bounded by `--request-timeout`. Hardening sits in front of all of it (http_guard).
"""

from __future__ import annotations

import itertools
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import anyio.abc
import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from frugal_proxy.bridge.downstream import ClientUnreachable, DownstreamPeer
from frugal_proxy.cli.serve import _run_upstream
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.protocol import eras, jsonrpc, subscriptions
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import ProgressSink
from frugal_proxy.router.router import Router
from frugal_proxy.server.events import EventLog
from frugal_proxy.server.governor_routes import governor_routes, http_error
from frugal_proxy.server.guard import HEALTH_PATH, Guard, GuardSettings, operator_of, read_messages
from frugal_proxy.server.legacy_sse import LegacySse
from frugal_proxy.server.metrics import METRICS_PATH, HttpMetrics, Metrics, scrape_handler
from frugal_proxy.server.sessions import HttpSession, HttpSessions, UpstreamSet
from frugal_proxy.upstream import http_wire as wire
from frugal_proxy.upstream.base import UpstreamBase

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
DRAIN_SECONDS = 5.0
REQUEST_TIMEOUT = -32001  # the code SDKs use for a request that timed out


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    path: str = "/mcp"
    stateless: bool = False
    idle_timeout: float = 1800.0
    max_sessions: int = 100
    request_timeout: float = 30.0
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
    """A refusal of the endpoint's own (not an upstream's answer), logged at warn: what was wrong,
    never the request's payload."""
    log.warning("request refused: %s", message[:200], extra={"status": status, "code": code})
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


async def _write_events(send: Send, stream: EventLog, after: int, *, ids: bool, prime: bool = False) -> bool:
    """Write a log's events numbered above `after` as SSE, each with its id when `ids`, until
    the log is closed; False when the client went away (or another connection took the stream
    over) first. `prime` first sends an event with an id and no data (2025-11-25), so that a
    client can resume before the first message."""
    with stream.reader() as reading:
        try:
            if prime:
                await send({"type": "http.response.body", "body": _priming(stream, after), "more_body": True})
            async for number, data in stream.follow(after):
                head = b"id: " + stream.event_id(number).encode() + b"\n" if ids else b""
                await send({"type": "http.response.body", "body": head + _sse(data), "more_body": True})
                stream.written(number)
        except OSError:
            return False
    try:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:
        return False
    return not reading.cancelled_caught


def _priming(stream: EventLog, after: int) -> bytes:
    return b"id: " + stream.event_id(after).encode() + b"\ndata: \n\n"


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class ReplyStream(Response):
    """An SSE response scoped to one request: its notifications (progress), then its reply.
    `answer` is called with the stream's writer, where the request's own notifications go.

    Not resumable (2026-07-28, stateless): closing the stream cancels the call. Resumable
    (a session-era session): the call goes on and its events wait in the session's event log
    for a GET with `Last-Event-ID`."""

    def __init__(
        self,
        answer: Callable[[ProgressSink], Awaitable[Frame | None]],
        stream: EventLog,
        *,
        resumable: bool,
        prime: bool = False,
        rewrite: Callable[[Frame], Frame] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(media_type="text/event-stream", headers={"Cache-Control": "no-store", **(headers or {})})
        _streaming(self)
        self.answer = answer
        self.stream = stream
        self.resumable = resumable
        self.prime = prime
        self.rewrite = rewrite

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream, rewrite = self.stream, self.rewrite
        produced = anyio.Event()

        async def push(frame: Frame) -> None:
            stream.append(jsonrpc.encode(rewrite(frame) if rewrite is not None else frame))

        async def produce() -> None:
            try:
                reply = await self.answer(push)
                if reply is not None:
                    stream.append(jsonrpc.encode(reply))
            finally:
                stream.close()
                produced.set()

        writing = anyio.CancelScope()

        async def write() -> None:
            delivered = False
            with writing:
                delivered = await _write_events(send, stream, 0, ids=self.resumable, prime=self.prime)
            if not delivered and self.resumable:
                await produced.wait()  # the session-era call goes on; its events wait for Last-Event-ID
            tg.cancel_scope.cancel()

        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            tg.start_soon(write)
            await _until_disconnect(receive)
            if self.resumable:
                writing.cancel()
            else:
                log.info("client closed a request's stream; the call is cancelled")
                tg.cancel_scope.cancel()


class EventStream(Response):
    """A GET stream of a session-era session: its standalone stream (what the proxy sends the
    client unasked), or the rest of a request's stream resumed with `Last-Event-ID`."""

    def __init__(self, entry: HttpSession, stream: EventLog, after: int) -> None:
        super().__init__(media_type="text/event-stream", headers={"Cache-Control": "no-store"})
        _streaming(self)
        self.entry = entry
        self.stream = stream
        self.after = after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry, stream = self.entry, self.stream
        entry.busy += 1
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": b": stream open\n\n", "more_body": True})
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    await _write_events(send, stream, self.after, ids=True)
                    tg.cancel_scope.cancel()

                tg.start_soon(write)
                await _until_disconnect(receive)
                tg.cancel_scope.cancel()
        except OSError:
            pass
        finally:
            entry.busy -= 1
            entry.touch()


class Endpoint:
    """The MCP endpoint's request handling, era by era."""

    def __init__(self, shared: Router, sessions: HttpSessions | None, settings: HttpSettings) -> None:
        self.shared = shared
        self.sessions = sessions
        self.settings = settings
        self._ids = itertools.count(1)
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}  # learnt from tools/list

    async def handle(self, request: Request) -> Response:
        version = request.headers.get("mcp-protocol-version")
        modern = version is not None and version not in eras.HANDSHAKE_VERSIONS
        if request.method != "POST":
            if modern or self.sessions is None:
                return Response(status_code=405, headers={"Allow": "POST"})
            return await self._session_get_or_delete(request)
        read = await read_messages(request, self.settings.guard.body_cap)
        if isinstance(read, Response):
            return read
        frames, batch = read
        if batch:
            return await self._batch(request, frames, version)
        frame = frames[0]
        method = jsonrpc.method_of(frame)
        if method == "initialize" and not modern:
            return await self._initialize(request, frame)
        if modern or eras.modern_meta(jsonrpc.params_of(frame)) is not None:
            return await self._modern(request, frame, version)
        if self.sessions is None:
            return await self._take(self.shared, frame, version, operator=operator_of(request))
        entry = self._session_of(request)
        if isinstance(entry, Response):
            return entry
        entry.touch()
        return await self._take(entry.session, frame, version, entry)

    # -- 2026-07-28 ----------------------------------------------------------------------------------

    async def _modern(self, request: Request, frame: Frame, version: str | None) -> Response:
        ident = jsonrpc.id_of(frame)
        if jsonrpc.is_reply(frame):
            return _rpc_error(400, jsonrpc.INVALID_REQUEST, "2026-07-28 clients do not POST responses")
        if jsonrpc.is_notification(frame):
            return Response(status_code=202)  # over HTTP the core protocol has no client notifications
        method = jsonrpc.method_of(frame) or ""
        params = jsonrpc.params_of(frame)
        meta = jsonrpc.sub_object(params, "_meta")
        stated = jsonrpc.decode_any(meta[eras.META_VERSION]) if eras.META_VERSION in meta else None
        missing = [key for key in (eras.META_VERSION, eras.META_CAPABILITIES) if key not in meta]
        if missing:
            message = (
                f"params._meta lacks {', '.join(repr(key) for key in missing)}: a 2026-07-28 request "
                "carries its protocol version and client capabilities in params._meta"
            )
            return _rpc_error(400, jsonrpc.INVALID_PARAMS, message, ident)
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
        if method in eras.HANDSHAKE_ONLY_METHODS:
            message = f"{method} is not part of MCP {version}: the 2026-07-28 revision has no handshake or session"
            return _rpc_error(404, jsonrpc.METHOD_NOT_FOUND, message, ident)
        if wire.decode_header_value(request.headers.get("mcp-method", "")) != method:
            return _rpc_error(
                400, jsonrpc.HEADER_MISMATCH, f"Mcp-Method header does not match method {method!r}", ident
            )
        key = NAME_KEYS.get(method)
        if key is not None:
            named = jsonrpc.decode_any(params[key]) if key in params else None
            if wire.decode_header_value(request.headers.get("mcp-name", "")) != named:
                return _rpc_error(400, jsonrpc.HEADER_MISMATCH, f"Mcp-Name header does not match params.{key}", ident)
        if method == "tools/call":
            problem = self._param_problem(request, params)
            if problem is not None:
                return _rpc_error(400, jsonrpc.HEADER_MISMATCH, problem, ident)
        # Clients number their requests independently; the shared Router sees unique ids.
        inner = jsonrpc.with_id(frame, f"http-{next(self._ids)}")
        operator = operator_of(request)
        if method == "subscriptions/listen":
            return self._listen(inner, ident, operator)
        return await self._request(self.shared, inner, ident, modern=True, operator=operator)

    def _param_problem(self, request: Request, params: dict[str, msgspec.Raw]) -> str | None:
        """Check a tools/call's `Mcp-Param-*` headers against its arguments, for the tools whose
        listing (seen by this endpoint) declares `x-mcp-header` arguments; the headers are kept
        for an HTTP upstream, which gets the unrecognised ones as they came."""
        sent = [(key, value) for key, value in request.headers.items() if key.startswith("mcp-param-")]
        name = jsonrpc.decode_any(params["name"]) if "name" in params else None
        declared = self._param_headers.get(name) if isinstance(name, str) else None
        if declared is None and not sent:
            return None
        if sent:
            wire.FORWARDED_PARAMS.set(dict(sent))
        if declared is None:
            return None  # a tool not listed here: the upstream checks its own
        arguments = jsonrpc.decode_any(params["arguments"]) if "arguments" in params else {}
        return wire.param_header_problem(declared, arguments, sent)

    def _listen(self, frame: Frame, ident: Any, operator: str) -> Response:
        """A listen stream: acknowledged, then change notifications tagged with the client's own
        request id, until the client closes it (no request timeout applies)."""

        async def answer(stream: ProgressSink) -> Frame | None:
            reply = await self.shared.reply_to(frame, operator=operator, stream=stream)
            return None if reply is None else jsonrpc.with_id(reply, ident)

        return ReplyStream(
            answer, EventLog("listen"), resumable=False, rewrite=lambda note: subscriptions.tag(note, ident)
        )

    # -- the session era -----------------------------------------------------------------------------

    async def _initialize(self, request: Request, frame: Frame) -> Response:
        if self.sessions is None:
            return await self._request(
                self.shared, frame, jsonrpc.id_of(frame), modern=False, operator=operator_of(request)
            )
        if len(self.sessions) >= self.settings.max_sessions:
            message = f"too many sessions ({self.settings.max_sessions}); end one with DELETE or try later"
            return _rpc_error(503, jsonrpc.INTERNAL_ERROR, message, jsonrpc.id_of(frame))
        entry = await self.sessions.open()
        entry.session.operator = operator_of(request)  # the session belongs to the token that started it
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
        if entry.session.operator != operator_of(request):
            log.warning("request on another operator's session refused", extra={"status": 403})
            message = "this session belongs to another operator: use the token that initialized it"
            return _rpc_error(403, jsonrpc.INVALID_REQUEST, message)
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
        events = entry.outbox.events
        last_event_id = request.headers.get("last-event-id")
        if last_event_id is not None:
            found = events.resume(last_event_id)
            if found is None:
                message = "Last-Event-ID names no event this session holds; open the GET stream without it"
                return _rpc_error(400, jsonrpc.INVALID_REQUEST, message)
            stream, after = found
        else:
            stream, after = events.standalone, events.standalone.delivered
        return EventStream(entry, stream, after)

    async def _take(
        self,
        session: Router,
        frame: Frame,
        version: str | None,
        entry: HttpSession | None = None,
        *,
        operator: str | None = None,
    ) -> Response:
        if jsonrpc.is_request(frame):
            ident = jsonrpc.id_of(frame)
            return await self._request(
                session, frame, ident, modern=False, entry=entry, version=version, operator=operator
            )
        await session.take_in(frame)
        return Response(status_code=202)

    async def _batch(self, request: Request, frames: list[Frame], version: str | None) -> Response:
        """A 2025-03-26 batch: its requests answered together as one JSON array (202 when it
        holds only notifications and responses). Later revisions removed batches."""
        if version is not None and version != "2025-03-26":
            message = (
                f"JSON-RPC batches are not part of MCP {version} (only 2025-03-26 has them); send one message per POST"
            )
            return _rpc_error(400, jsonrpc.INVALID_REQUEST, message)
        if any(jsonrpc.method_of(frame) == "initialize" for frame in frames):
            return _rpc_error(400, jsonrpc.INVALID_REQUEST, "initialize must not be part of a batch")
        if any(eras.modern_meta(jsonrpc.params_of(frame)) is not None for frame in frames):
            return _rpc_error(400, jsonrpc.INVALID_REQUEST, "2026-07-28 requests cannot be batched")
        entry: HttpSession | None = None
        session = self.shared
        operator: str | None = operator_of(request)
        if self.sessions is not None:
            found = self._session_of(request)
            if isinstance(found, Response):
                return found
            entry, session, operator = found, found.session, None
            entry.touch()
        replies: list[Frame | None] = [None] * len(frames)

        async def one(index: int, frame: Frame) -> None:
            if jsonrpc.is_request(frame):
                replies[index] = await self.answer(session, frame, jsonrpc.id_of(frame), entry, operator)
            else:
                await session.take_in(frame)

        async with anyio.create_task_group() as tg:
            for index, frame in enumerate(frames):
                tg.start_soon(one, index, frame)
        answered = [reply for reply in replies if reply is not None]
        if not answered:
            return Response(status_code=202)
        return Response(jsonrpc.encode(answered), 200, media_type="application/json")

    # -- answering -----------------------------------------------------------------------------------

    async def answer(
        self,
        session: Router,
        frame: Frame,
        ident: Any,
        entry: HttpSession | None,
        operator: str | None = None,
        stream: ProgressSink | None = None,
    ) -> Frame:
        """The reply to a request with the client's id, within the request timeout: past it the
        request is cancelled upstream and answered with an error (a tool error for a tool call).
        `operator` is the request's (the shared session's requests), None for a session's own;
        `stream` is the request's response stream when it has one."""
        if entry is not None:
            entry.busy += 1  # a session with a call in flight never expires
        try:
            with anyio.move_on_after(self.settings.request_timeout) as scope:
                reply = await session.reply_to(frame, operator=operator, stream=stream)
        finally:
            if entry is not None:
                entry.busy -= 1
                entry.touch()
        if scope.cancelled_caught:
            method = jsonrpc.method_of(frame)
            message = (
                f"{method} got no answer within {self.settings.request_timeout:g} s (the request timeout, "
                "--request-timeout); it was cancelled upstream"
            )
            log.warning("request timed out", extra={"method": method, "seconds": self.settings.request_timeout})
            if method == "tools/call":
                return jsonrpc.result(ident, jsonrpc.tool_error_result(message))
            return jsonrpc.error(ident, REQUEST_TIMEOUT, message)
        if reply is None:
            return jsonrpc.error(ident, jsonrpc.INTERNAL_ERROR, "the request was cancelled")
        if session is self.shared and jsonrpc.method_of(frame) == "tools/list":
            wire.learn_param_headers(reply, self._param_headers)
        return jsonrpc.with_id(reply, ident)

    async def _request(
        self,
        session: Router,
        frame: Frame,
        ident: Any,
        *,
        modern: bool,
        entry: HttpSession | None = None,
        version: str | None = None,
        operator: str | None = None,
    ) -> Response:
        async def answer(stream: ProgressSink) -> Frame | None:
            return await self.answer(session, frame, ident, entry, operator, stream)

        if "progressToken" in jsonrpc.sub_object(jsonrpc.params_of(frame), "_meta"):
            if entry is None:  # 2026-07-28, or a stateless session-era client: nothing to resume
                return ReplyStream(answer, EventLog("request"), resumable=False)
            prime = version is not None and version >= "2025-11-25"
            return ReplyStream(answer, entry.outbox.events.open(), resumable=True, prime=prime)
        return _reply_response(await self.answer(session, frame, ident, entry, operator), modern=modern)

    # -- health ----------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        upstreams = {link.name: "up" if link.upstream.running else "down" for link in self.shared.links}
        return JSONResponse({"status": "ok", "upstreams": upstreams})


def build_app(endpoint: Endpoint, settings: HttpSettings, metrics: Metrics) -> HttpMetrics:
    """The ASGI application: request metrics outside the guard (refusals count too), the guard
    in front of the MCP endpoint, /healthz and /metrics (and the 2024-11-05 HTTP+SSE pair)."""
    legacy_routes: list[Route] = []
    if endpoint.sessions is not None:
        legacy = LegacySse(endpoint.sessions, endpoint.answer, settings.guard.body_cap, settings.max_sessions)
        legacy_routes = legacy.routes()
    app = Starlette(
        routes=[
            Route(settings.path, endpoint.handle, methods=["POST", "GET", "DELETE"]),
            Route(HEALTH_PATH, endpoint.health, methods=["GET"]),
            Route(METRICS_PATH, scrape_handler(metrics), methods=["GET"]),
            *governor_routes(endpoint.shared.assembly.governor, settings.guard),
            *legacy_routes,
        ],
        exception_handlers={HTTPException: http_error},
    )
    paths = [route.path for route in app.routes if isinstance(route, Route)]
    return HttpMetrics(Guard(app, settings.guard), metrics, paths)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: serve_http stops it (and drains) itself."""

    def capture_signals(self) -> Any:
        import contextlib

        return contextlib.nullcontext()


class _NoClient:
    """The shared Router's client side: nothing reaches a stateless client unasked. A
    server→client request (sampling, elicitation, roots) for a session-era client is refused
    with the reason, which its call's error carries."""

    async def send(self, frame: Frame | list[Frame]) -> None:
        if isinstance(frame, dict) and jsonrpc.is_request(frame):
            message = (
                f"the upstream asked the client for {jsonrpc.method_of(frame)}, which cannot reach a session-era "
                "client without a session (--stateless); use a 2026-07-28 client, or serve without --stateless"
            )
            raise ClientUnreachable(message)
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
    metrics = Metrics()  # every session's pipeline feeds it, so it goes into their shared assembly
    options = dict(upstreams.options)
    assembly = assemble(options.pop("governor", None), metrics=metrics)
    upstreams = replace(upstreams, options={**options, "assembly": assembly})
    connections: list[UpstreamBase] = upstreams.make()
    metrics.watch(connections)
    async with anyio.create_task_group() as tg:
        for upstream in connections:
            await tg.start(_run_upstream, upstream, upstream.name in upstreams.lazy)
        if ready is not None:
            problem = await ready(connections)
            if problem is not None:
                print(f"frugal-proxy: {problem}", file=sys.stderr)
                tg.cancel_scope.cancel()
                return 2
        shared = Router(connections, DownstreamPeer(_NoClient()), tg, **upstreams.options)
        sessions = None
        if not settings.stateless:
            sessions = HttpSessions(
                tg, upstreams, idle_timeout=settings.idle_timeout, max_sessions=settings.max_sessions
            )
            tg.start_soon(sessions.expire_idle)
        endpoint = Endpoint(shared, sessions, settings)
        config = uvicorn.Config(
            build_app(endpoint, settings, metrics),
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
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on connections accepted from a socket
    # that says it is TCP, and without it a response's body waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(256)
    except OSError:
        sock.close()
        raise
    return sock
