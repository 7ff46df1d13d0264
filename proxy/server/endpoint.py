"""The downstream Streamable HTTP endpoint `/mcp` (and `/healthz`); app.py puts it beside
`/metrics`, the governor's routes (governor_routes) and the 2024-11-05 HTTP+SSE pair (legacy_sse).

    POST, 2026-07-28 (`MCP-Protocol-Version` header, `_meta` in the body)
        served statelessly by the one shared Router; headers (`Mcp-Method`, `Mcp-Name`,
        `Mcp-Param-*`) checked against the body; JSON, or an SSE stream of the request's
        progress and then its reply when it asked for progress (a `subscriptions/listen`
        stream for as long as the client holds it); closing that stream cancels the call
    POST initialize (session era)
        a new Router with upstream connections of its own (sessions), `Mcp-Session-Id`
    POST / GET / DELETE with `Mcp-Session-Id`
        that session's requests (2025-03-26 batches too), replies and notifications / its
        standalone stream, or a stream resumed with `Last-Event-ID` (events) / its end
    --stateless
        no sessions: every request is served by the shared Router, GET and DELETE get 405

Every request is bounded by `--request-timeout`. Hardening sits in front of all of it (guard).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from frugal_proxy.bridge.link import UpstreamLink
from frugal_proxy.protocol import eras, jsonrpc, subscriptions
from frugal_proxy.protocol.headers import decode_header_value, learn_param_headers, param_header_problem
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import Exchange, ProgressSink, StreamCut
from frugal_proxy.router.answerers import Deadlines
from frugal_proxy.router.plain import PlainCall
from frugal_proxy.router.router import ReadRequest, Router, removed_in_modern
from frugal_proxy.server.connections import DEFAULT_KEEP_ALIVE_TIMEOUT, ConnectionLimits
from frugal_proxy.server.events import EventLog, Unresumable
from frugal_proxy.server.guard import (
    GuardSettings,
    RefusedBatch,
    headers_of,
    media_type_refusal,
    operator_of,
    read_messages,
)
from frugal_proxy.server.sessions import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_RECLAIM_AFTER,
    SESSIONS_FULL,
    HttpSession,
    HttpSessions,
)
from frugal_proxy.server.streams import (
    CancellableReply,
    EventStream,
    PlainReply,
    ReplyStream,
    cancelled_reply,
    prefers_event_stream,
    reply_response,
    rpc_error,
    timed_out_reply,
    until_disconnect,
)

log = logging.getLogger("frugal_proxy.http_server")

SESSION_HEADER = "mcp-session-id"
NAME_KEYS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
HEALTH_PROBE = 2.0  # seconds an upstream has to answer /healthz's probe


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8765
    path: str = "/mcp"
    stateless: bool = False
    idle_timeout: float = 1800.0
    max_sessions: int = 100
    request_timeout: float = 30.0
    # How long a 2025-11-25 request's SSE stream waits for its reply before the proxy ends it for
    # the client to resume (SEP-1699 polling); None: it waits for the reply
    sse_poll_after: float | None = None
    guard: GuardSettings = field(default_factory=GuardSettings)
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    reclaim_after: float = DEFAULT_RECLAIM_AFTER
    # The reverse proxies whose X-Forwarded-For / -Proto are believed (None: nobody's; the
    # client IP the rate limit and the logs key on is then the connection's own)
    forwarded_allow_ips: list[str] | None = None
    # The replica id given to this process (--replica-id, FRUGAL_REPLICA_ID): session ids begin with it
    replica: str | None = None


class Endpoint:
    """The MCP endpoint's request handling, era by era."""

    def __init__(self, shared: Router, sessions: HttpSessions | None, settings: HttpSettings) -> None:
        self.shared = shared
        self.sessions = sessions
        self.settings = settings
        self._ids = itertools.count(1)
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}  # learnt from tools/list
        self._deadlines = Deadlines()  # the request timeouts of the plain calls in flight
        self._loop: asyncio.AbstractEventLoop | None = None

    async def handle(self, request: Request) -> Response:
        version = headers_of(request).get("mcp-protocol-version")
        modern = version is not None and version not in eras.HANDSHAKE_VERSIONS
        if request.method != "POST":
            if modern or self.sessions is None:
                return Response(status_code=405, headers={"Allow": "POST"})
            return media_type_refusal(request) or await self._session_get_or_delete(request)
        refused = media_type_refusal(request)
        if refused is not None:
            return refused
        read = await read_messages(request, self.settings.guard.body_cap)
        if isinstance(read, RefusedBatch) and self._batches_per_element(request, version):
            return await self._batch(request, read.elements, version)
        if isinstance(read, Response):
            return read
        frames, batch = read
        try:
            return await self._post(request, frames, batch, version, modern)
        except jsonrpc.MessageError as exc:  # a value too long to have been checked whole
            ident = exc.request_id if exc.request_id is not None or batch else jsonrpc.id_of(frames[0])
            return rpc_error(400, exc.code, str(exc), ident)

    async def _post(
        self, request: Request, frames: list[Frame], batch: bool, version: str | None, modern: bool
    ) -> Response:
        if batch:
            return await self._batch(request, frames, version)
        frame = frames[0]
        method = jsonrpc.method_of(frame)
        if method == "initialize" and not modern:
            return await self._initialize(request, frame)
        params = jsonrpc.params_of(frame)
        if modern or eras.modern_meta(params) is not None:
            return await self._modern(request, frame, version, method or "", params)
        sse = prefers_event_stream(headers_of(request).get("accept"))
        if self.sessions is None:
            if version in eras.HANDSHAKE_VERSIONS:  # its initialize may have reached another replica
                self.shared.handshakes.assume_initialized(version)
            return await self._take(self.shared, frame, version, operator=operator_of(request), sse=sse, params=params)
        entry = self._session_of(request)
        if isinstance(entry, Response):
            return entry
        entry.touch()
        return await self._take(entry.session, frame, version, entry, sse=sse, params=params)

    # -- 2026-07-28 ----------------------------------------------------------------------------------

    async def _modern(
        self, request: Request, frame: Frame, version: str | None, method: str, params: dict[str, msgspec.Raw]
    ) -> Response:
        """`params` is the frame's, decoded already."""
        ident = jsonrpc.id_of(frame)
        if jsonrpc.is_reply(frame):
            return rpc_error(400, jsonrpc.INVALID_REQUEST, "2026-07-28 clients do not POST responses")
        if jsonrpc.is_notification(frame):
            return Response(status_code=202)  # over HTTP the core protocol has no client notifications
        meta = jsonrpc.sub_object(params, "_meta")
        stated = jsonrpc.decode_any(meta[eras.META_VERSION]) if eras.META_VERSION in meta else None
        if stated is None or eras.META_CAPABILITIES not in meta:
            missing = [key for key in (eras.META_VERSION, eras.META_CAPABILITIES) if key not in meta]
        else:
            missing = []
        if missing:
            message = (
                f"params._meta lacks {', '.join(repr(key) for key in missing)}: a 2026-07-28 request "
                "carries its protocol version and client capabilities in params._meta"
            )
            return rpc_error(400, jsonrpc.INVALID_PARAMS, message, ident)
        if version != stated:
            return rpc_error(
                400,
                jsonrpc.HEADER_MISMATCH,
                f"MCP-Protocol-Version header {version!r} does not match _meta[{eras.META_VERSION!r}] {stated!r}",
                ident,
            )
        if version not in eras.MODERN_VERSIONS:
            unsupported = eras.UnsupportedVersion(ident or 0, str(version))
            return rpc_error(400, unsupported.code, str(unsupported), ident, unsupported.data())
        removed = removed_in_modern(method, version)
        if removed is not None:  # the router's rule; checked here too, so initialize never reaches a router
            return rpc_error(404, jsonrpc.METHOD_NOT_FOUND, removed, ident)
        headers = headers_of(request)
        if decode_header_value(headers.get("mcp-method", "")) != method:
            return rpc_error(400, jsonrpc.HEADER_MISMATCH, f"Mcp-Method header does not match method {method!r}", ident)
        key = NAME_KEYS.get(method)
        named: Any = None
        if key is not None:
            named = jsonrpc.decode_any(params[key]) if key in params else None
            if decode_header_value(headers.get("mcp-name", "")) != named:
                return rpc_error(400, jsonrpc.HEADER_MISMATCH, f"Mcp-Name header does not match params.{key}", ident)
        if method == "tools/call":
            sent = {key: value for key, value in headers.items() if key.startswith("mcp-param-")}
            problem = self._param_problem(named, params, sent)
            if problem is not None:
                return rpc_error(400, jsonrpc.HEADER_MISMATCH, problem, ident)
        else:
            sent = {}
        inner, inner_id = self._renumbered(frame)
        operator = operator_of(request)
        if method == "subscriptions/listen":
            return self._listen(inner, ident, operator)
        read = ReadRequest(params, inner_id, meta)
        return await self._request(
            self.shared, inner, ident, modern=True, operator=operator, headers=sent or None, read=read
        )

    def _param_problem(self, name: Any, params: dict[str, msgspec.Raw], sent: dict[str, str]) -> str | None:
        """Check a tools/call's `Mcp-Param-*` headers against its arguments, for the tools whose
        listing (seen by this endpoint) declares `x-mcp-header` arguments; `name` is its
        `params.name`, decoded. The headers go on with the call (an HTTP upstream gets the
        unrecognised ones as they came)."""
        declared = self._param_headers.get(name) if isinstance(name, str) else None
        if declared is None:
            return None  # a tool not listed here: the upstream checks its own
        arguments = jsonrpc.decode_any(params["arguments"]) if "arguments" in params else {}
        return param_header_problem(declared, arguments, list(sent.items()))

    def _listen(self, frame: Frame, ident: Any, operator: str) -> Response:
        """A listen stream: acknowledged, then change notifications tagged with the client's own
        request id, until the client closes it (no request timeout applies)."""

        async def answer(stream: ProgressSink, on_cut: StreamCut) -> Frame | None:
            reply = await self.shared.reply_to(frame, operator=operator, stream=stream)
            return None if reply is None else jsonrpc.with_id(reply, ident)

        return ReplyStream(
            answer, EventLog("listen"), resumable=False, rewrite=lambda note: subscriptions.tag(note, ident)
        )

    # -- the session era -----------------------------------------------------------------------------

    async def _initialize(self, request: Request, frame: Frame) -> Response:
        operator = operator_of(request)
        if self.sessions is None:
            return await self._request(
                self.shared, self._unique(frame), jsonrpc.id_of(frame), modern=False, operator=operator
            )
        full = self.sessions.make_room()
        if full is not None:
            message, retry = full
            refused = rpc_error(503, SESSIONS_FULL, message, jsonrpc.id_of(frame))
            refused.headers["Retry-After"] = str(retry)
            return refused
        # The session belongs to the token that started it (sessions.open makes it its operator).
        entry = await self.sessions.open(jsonrpc.params_of(frame), operator=operator)
        entry.busy += 1
        try:
            reply, abandoned = await _unless_client_leaves(request, entry.session.reply_to(frame))
        finally:
            entry.busy -= 1
            entry.touch()
        if abandoned:  # nobody will ever learn this session's id: it must not hold a slot
            self.sessions.end(entry.id)
            log.warning("initialize abandoned by its client; session dropped", extra={"sessions": len(self.sessions)})
            return Response(status_code=499)
        if reply is None or jsonrpc.error_of(reply) is not None:
            self.sessions.end(entry.id)
            failed = reply or jsonrpc.error(jsonrpc.id_of(frame), jsonrpc.INTERNAL_ERROR, "initialize was cancelled")
            return reply_response(failed)
        log.info("session started", extra={"sessions": len(self.sessions)})
        self.sessions.await_handshake(entry)
        return reply_response(reply, {"Mcp-Session-Id": entry.id})

    def _session_of(self, request: Request) -> HttpSession | Response:
        """The session a request names, or the answer to give when it names none that lives."""
        assert self.sessions is not None
        session_id = headers_of(request).get(SESSION_HEADER)
        if session_id is None:
            return rpc_error(400, jsonrpc.INVALID_REQUEST, "missing Mcp-Session-Id: initialize first")
        entry = self.sessions.get(session_id)
        if entry is None:
            return rpc_error(404, jsonrpc.INVALID_REQUEST, "unknown or ended session: initialize again")
        if entry.session.operator != operator_of(request):
            log.warning("request on another operator's session refused", extra={"status": 403})
            message = "this session belongs to another operator: use the token that initialized it"
            return rpc_error(403, jsonrpc.INVALID_REQUEST, message)
        entry.confirm()
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
        last_event_id = headers_of(request).get("last-event-id")
        if last_event_id is not None:
            try:
                stream, after = events.resume(last_event_id)
            except Unresumable as exc:
                return rpc_error(400, jsonrpc.INVALID_REQUEST, str(exc))
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
        sse: bool = False,
        params: dict[str, msgspec.Raw] | None = None,
    ) -> Response:
        """`params` is the frame's, where the caller has decoded them."""
        if jsonrpc.is_request(frame):
            ident = jsonrpc.id_of(frame)
            inner, inner_id = (frame, ident) if entry is not None else self._renumbered(frame)
            read = ReadRequest(params, inner_id, jsonrpc.sub_object(params, "_meta")) if params is not None else None
            return await self._request(
                session, inner, ident, modern=False, entry=entry, version=version, operator=operator, sse=sse, read=read
            )
        await session.take_in(frame)
        return Response(status_code=202)

    def _unique(self, frame: Frame) -> Frame:
        """A request for the shared Router with an id of the endpoint's own: every client (a
        2026-07-28 one, a stateless session-era one) numbers its requests itself, and an id two
        of them share must neither replace the other's in the Router's in-flight table nor let
        one's `notifications/cancelled` cancel the other's call (a stateless session-era client
        has no session to tell its requests apart, so such a notification cancels nothing)."""
        return self._renumbered(frame)[0]

    def _renumbered(self, frame: Frame) -> tuple[Frame, str]:
        """`_unique`'s frame, and its new id."""
        ident = f"http-{next(self._ids)}"
        return jsonrpc.with_id(frame, ident), ident

    def _batches_per_element(self, request: Request, version: str | None) -> bool:
        """Whether a batch with bad elements is answered element by element: a 2025-03-26
        client's (by its header, or the session it negotiated; that revision sent no header)."""
        if version is not None or self.sessions is None:
            return version == eras.BATCH_VERSION
        entry = self.sessions.get(headers_of(request).get(SESSION_HEADER, ""))
        return entry is not None and entry.session.client.protocol_version == eras.BATCH_VERSION

    async def _batch(
        self, request: Request, elements: Sequence[Frame | jsonrpc.MessageError], version: str | None
    ) -> Response:
        """A 2025-03-26 batch: its requests answered together as one JSON array (202 when it
        holds only notifications and responses), an element that is not a usable message with
        its own error in it (JSON-RPC 2.0's batch rules). Later revisions removed batches."""
        frames = [element for element in elements if not isinstance(element, jsonrpc.MessageError)]
        if version is not None and version != eras.BATCH_VERSION:
            message = (
                f"JSON-RPC batches are not part of MCP {version} (only 2025-03-26 has them); send one message per POST"
            )
            return rpc_error(400, jsonrpc.INVALID_REQUEST, message)
        if any(jsonrpc.method_of(frame) == "initialize" for frame in frames):
            return rpc_error(400, jsonrpc.INVALID_REQUEST, "initialize must not be part of a batch")
        if any(eras.modern_meta(jsonrpc.params_of(frame)) is not None for frame in frames):
            return rpc_error(400, jsonrpc.INVALID_REQUEST, "2026-07-28 requests cannot be batched")
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
                inner = frame if entry is not None else self._unique(frame)
                replies[index] = await self.answer(session, inner, jsonrpc.id_of(frame), entry, operator)
            else:
                await session.take_in(frame)

        async with anyio.create_task_group() as tg:
            for index, frame in enumerate(frames):
                tg.start_soon(one, index, frame)
        bad = jsonrpc.element_errors(elements)
        if bad:
            log.warning(
                "client sent a bad batch element",
                extra={"count": len(bad), "first": str(jsonrpc.error_of(bad[0]))[:200]},
            )
        answered = [reply for reply in replies if reply is not None] + bad
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
        headers: Mapping[str, str] | None = None,
        resume: Exchange | None = None,
        on_cut: StreamCut | None = None,
    ) -> Frame:
        """The reply to a request with the client's id, within the request timeout: past it the
        request is cancelled upstream and answered with an error (a tool error for a tool call).
        `operator` is the request's (the shared session's requests), None for a session's own;
        `stream` is the request's response stream when it has one, and `on_cut` what closes it
        when an upstream closes its own stream for the request mid-call."""
        if entry is not None:
            entry.busy += 1  # a session with a call in flight never expires
        try:
            with anyio.move_on_after(self.settings.request_timeout) as scope:
                reply = await session.reply_to(
                    frame, operator=operator, stream=stream, headers=headers, resume=resume, on_cut=on_cut
                )
        finally:
            if entry is not None:
                entry.busy -= 1
                entry.touch()
        if scope.cancelled_caught:
            modern = eras.modern_meta(jsonrpc.params_of(frame)) is not None
            return timed_out_reply(ident, jsonrpc.method_of(frame), self.settings.request_timeout, modern=modern)
        if reply is None:
            return cancelled_reply(ident)
        if session is self.shared and jsonrpc.method_of(frame) == "tools/list":
            learn_param_headers(reply, self._param_headers)
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
        headers: Mapping[str, str] | None = None,
        sse: bool = False,
        read: ReadRequest | None = None,
    ) -> Response:
        """The response to one request: an SSE stream when it asked for progress, or when a
        session-era client prefers one (`sse`: its Accept ranks text/event-stream above JSON);
        plain JSON otherwise, the cheaper answer, which the SDK clients (JSON listed first) get.
        `read` is what the caller has decoded of the frame already."""

        async def answer(stream: ProgressSink, on_cut: StreamCut) -> Frame | None:
            return await self.answer(session, frame, ident, entry, operator, stream, headers, on_cut=on_cut)

        meta = read.meta if read is not None else None
        if read is None or meta is None:
            params = jsonrpc.params_of(frame) if read is None else read.params
            meta = jsonrpc.sub_object(params, "_meta")
            read = ReadRequest(params, jsonrpc.id_of(frame), meta)
        if sse or "progressToken" in meta:
            if entry is None:  # 2026-07-28, or a stateless session-era client: nothing to resume
                return ReplyStream(answer, EventLog("request"), resumable=False)
            prime = version is not None and version >= "2025-11-25"
            poll = self.settings.sse_poll_after
            return ReplyStream(answer, entry.outbox.events.open(), resumable=True, prime=prime, poll_after=poll)
        resume = None
        if headers is None:
            plain = await self._plain(session, frame, ident, entry, operator, modern, read)
            if isinstance(plain, PlainReply):
                return plain
            resume = plain
        if modern:
            return CancellableReply(lambda: self.answer(session, frame, ident, entry, operator, None, headers, resume))
        return reply_response(await self.answer(session, frame, ident, entry, operator, None, headers, resume))

    async def _plain(
        self,
        session: Router,
        frame: Frame,
        ident: Any,
        entry: HttpSession | None,
        operator: str | None,
        modern: bool,
        read: ReadRequest,
    ) -> PlainReply | Exchange | None:
        """A plain tools/call sent upstream at once (Router.open_plain) and the response that
        waits for its reply; else None, or the exchange the pipeline opened, for `answer`."""
        if entry is not None:
            entry.busy += 1  # a session with a call in flight never expires

        def ended() -> None:
            if entry is not None:
                entry.busy -= 1
                entry.touch()

        timeout = self.settings.request_timeout
        loop = self._loop
        if loop is None:  # kept: on Python 3.11 each get_running_loop() is a getpid() system call
            loop = self._loop = asyncio.get_running_loop()
        reply = PlainReply(ident, modern=modern, timeout=timeout, on_end=ended, deadlines=self._deadlines, loop=loop)
        try:
            opened = await session.open_plain(frame, operator=operator, on_reply=reply.reply, read=read)
        except BaseException:
            ended()
            raise
        if isinstance(opened, PlainCall):
            reply.start(opened.cancel)
            return reply
        ended()
        return opened

    # -- health ----------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        """Each upstream `up` (it answered a probe within HEALTH_PROBE seconds), `unresponsive`
        (connected, but it did not: stopped, hung or overloaded) or `down`; with `[state] backend =
        "redis"`, `state`: `ok`, or `degraded` while Redis does not answer."""
        upstreams: dict[str, str] = {}

        async def probe(link: UpstreamLink) -> None:
            upstream = link.upstream
            if not upstream.running:
                upstreams[link.name] = "down"
                return
            upstreams[link.name] = "up" if await upstream.answers(HEALTH_PROBE) else "unresponsive"

        async with anyio.create_task_group() as tg:
            for link in self.shared.links:
                tg.start_soon(probe, link)
        ordered = {link.name: upstreams[link.name] for link in self.shared.links}
        body: dict[str, object] = {"status": "ok", "upstreams": ordered}
        state = self.shared.assembly.state  # the shared Redis: `ok` or `degraded`; absent with memory
        if state is not None:
            body["state"] = state
        return JSONResponse(body)


async def _unless_client_leaves(request: Request, work: Awaitable[Frame | None]) -> tuple[Frame | None, bool]:
    """`work`'s result and False, or (None, True) once the client has disconnected (`work` is
    then cancelled)."""
    result: Frame | None = None
    left = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal left
        await until_disconnect(request.receive)  # the body is read already: only the disconnect can come
        left = True
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        result = await work
        tg.cancel_scope.cancel()
    return result, left
