"""The endpoint's HTTP responses: JSON-RPC errors with the spec's status codes, plain JSON
replies, and the SSE streams (a request's own stream of progress then its reply, and a
session's standalone stream), written straight from the event logs (server.events).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.headers import accept_weights
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import ProgressSink, StreamCut
from frugal_proxy.router.answerers import Deadlines
from frugal_proxy.server.connections import DISCONNECT_HOOK, RESPOND_HOOK, nothing
from frugal_proxy.server.events import Cut, EventLog
from frugal_proxy.server.sessions import HttpSession

log = logging.getLogger("frugal_proxy.http_server")

STATUS_OF = {
    jsonrpc.PARSE_ERROR: 400,
    jsonrpc.INVALID_REQUEST: 400,
    jsonrpc.HEADER_MISMATCH: 400,
    jsonrpc.MISSING_CLIENT_CAPABILITY: 400,
    jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}


def rpc_error(status: int, code: int, message: str, ident: Any = None, data: Any = None) -> Response:
    """A refusal of the endpoint's own (not an upstream's answer), logged at warn: what was wrong,
    never the request's payload."""
    log.warning("request refused: %s", message[:200], extra={"status": status, "code": code})
    return _frame_response(jsonrpc.error(ident, code, message, data), status)


def _frame_response(frame: Frame, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(jsonrpc.encode(frame), status, headers, media_type="application/json")


def reply_status(reply: Frame, *, modern: bool) -> int:
    """A reply's HTTP status: a 2026-07-28 error gets the spec's (in the session era a 404
    would mean the session is gone, so every reply there is a 200)."""
    problem = jsonrpc.error_of(reply) if modern else None
    return STATUS_OF.get(problem[0], 200) if problem else 200


def reply_response(reply: Frame, headers: dict[str, str] | None = None, *, modern: bool = False) -> Response:
    """A reply as JSON, with `reply_status`."""
    return _frame_response(reply, reply_status(reply, modern=modern), headers)


def prefers_event_stream(accept: str | None) -> bool:
    """Whether an Accept header ranks text/event-stream above application/json: the highest
    `q` wins (1 unless given), and the first listed among equals. Without it, or with no
    preference for it, False: plain JSON, the cheaper answer."""
    if not accept or "event-stream" not in accept.lower():
        return False
    if ";" not in accept:  # no q-values (what clients send): the first listed wins
        return accept.split(",", 1)[0].strip().lower() == "text/event-stream"
    ranges = accept_weights(accept)
    best = max(ranges, key=lambda ranged: ranged[1], default=("", 0.0))  # max keeps the first of equals
    return best[0] == "text/event-stream"


def _streaming(response: Response) -> None:
    """Drop the Content-Length starlette sets for an empty body: an event stream has none."""
    response.raw_headers = [(key, value) for key, value in response.raw_headers if key != b"content-length"]


def _sse(data: bytes) -> bytes:
    return b"event: message\ndata: " + data + b"\n\n"


async def _write_events(
    send: Send, stream: EventLog, after: int, *, ids: bool, prime: bool = False, cut: Cut | None = None
) -> bool:
    """Write a log's events numbered above `after` as SSE, each with its id when `ids`, until
    the log is closed, or until a `cut` once it is set; whether every event went out: False when
    the client went away (or another connection took the stream over) first, or the cut ended
    the response before the log's end. `prime` first sends an event with an id and no data
    (2025-11-25), so that a client can resume before the first message."""
    written = after
    with stream.reader() as reading:
        try:
            if prime:
                await send({"type": "http.response.body", "body": _priming(stream, after), "more_body": True})
            async for number, data in stream.follow(after, cut):
                head = b"id: " + stream.event_id(number).encode() + b"\n" if ids else b""
                await send({"type": "http.response.body", "body": head + _sse(data), "more_body": True})
                stream.written(number)
                written = number
        except OSError:
            return False
    try:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:
        return False
    return not reading.cancelled_caught and stream.closed and written >= stream.last


# The `retry` of a priming event (SEP-1699): how long a client waits before it reconnects with
# Last-Event-ID to a stream that ended before its reply.
RECONNECT_MS = 1000


def _priming(stream: EventLog, after: int) -> bytes:
    return b"id: " + stream.event_id(after).encode() + b"\nretry: %d\ndata: \n\n" % RECONNECT_MS


async def until_disconnect(receive: Receive) -> None:
    """Returns once the client has disconnected (every other ASGI message is passed over)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class CancellableReply(Response):
    """A 2026-07-28 request's plain JSON reply, worked out while the response is served, so that
    a client that disconnects first (that revision's way of cancelling over HTTP: it has no
    client notifications) has the call cancelled, upstream too, at once. Under the proxy's own
    server the disconnect hook (connections) cancels it; elsewhere a task waits for the
    disconnect."""

    def __init__(self, answer: Callable[[], Awaitable[Frame | None]]) -> None:
        super().__init__(media_type="application/json")
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hook = scope.get("extensions", {}).get(DISCONNECT_HOOK)
        if hook is None:
            await self._watched(scope, receive, send)
            return
        with anyio.CancelScope() as cancelled:
            take_back = hook(cancelled.cancel)
            try:
                reply = await self._reply()
            finally:
                take_back()
        if cancelled.cancelled_caught:
            log.info("client disconnected before its reply; the call is cancelled")
        elif reply is not None:
            await reply(scope, receive, send)

    async def _reply(self) -> Response | None:
        try:
            reply = await self.answer()
        except jsonrpc.MessageError as exc:  # a value too long to have been checked whole
            return rpc_error(400, exc.code, str(exc), exc.request_id)
        return None if reply is None else reply_response(reply, modern=True)

    async def _watched(self, scope: Scope, receive: Receive, send: Send) -> None:
        replies: list[Response | None] = []
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await until_disconnect(receive)
                log.info("client disconnected before its reply; the call is cancelled")
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            replies.append(await self._reply())
            tg.cancel_scope.cancel()
        if replies and replies[0] is not None:
            await replies[0](scope, receive, send)


class PlainReply(Response):
    """The JSON reply to a plain tools/call that `Router.open_plain` has sent upstream, waited
    for on the request's own task: no task, cancel scope or timer of its own (the request
    timeout is one entry in the endpoint's `Deadlines`), and written whole in one write under
    the proxy's own server (`RESPOND_HOOK`), else as two ASGI messages, without starlette's
    header building either way. A 2026-07-28 client that disconnects first has the
    call cancelled, upstream too (the disconnect hook, or a task waiting for the disconnect
    under another server); past the request timeout the call is cancelled upstream and
    answered with a tool error, as `Endpoint.answer` answers it."""

    def __init__(
        self,
        ident: Any,
        *,
        modern: bool,
        timeout: float,
        on_end: Callable[[], object],
        deadlines: Deadlines,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        # Response's own __init__ is left out on purpose: nothing reads its headers or body.
        self.status_code = 200
        self.background = None
        self.ident = ident
        self.modern = modern
        self.timeout = timeout
        self.on_end = on_end  # the caller's bookkeeping once the reply is in (or not coming)
        self.deadlines = deadlines
        self.due = 0.0
        self.left = False
        self.cancel: Callable[[], object] = nothing
        self.reply_frame: asyncio.Future[Frame | None] = (loop or asyncio.get_running_loop()).create_future()

    def reply(self, frame: Frame | None) -> None:
        """The router's answer (None: the call was cancelled)."""
        if not self.reply_frame.done():
            self.reply_frame.set_result(frame)

    def start(self, cancel: Callable[[], object]) -> None:
        """The call is under way; `cancel` withdraws it. The request timeout runs from now."""
        self.cancel = cancel
        self.deadlines.watch(self, self.timeout)

    def expire(self) -> None:
        if self.reply_frame.done():
            return
        self.reply_frame.set_result(timed_out_reply(self.ident, "tools/call", self.timeout, modern=self.modern))
        self.cancel()

    def _disconnected(self) -> None:
        self.left = True
        self.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        extensions = scope.get("extensions") or {}
        hook = extensions.get(DISCONNECT_HOOK) if self.modern else None
        take_back = hook(self._disconnected) if hook is not None else nothing
        try:
            if self.modern and hook is None:
                reply = await self._watched(receive)
            else:
                reply = await self.reply_frame
        except BaseException:
            self.cancel()  # the server is stopping: the call is withdrawn upstream
            raise
        finally:
            take_back()
            self.deadlines.unwatch(self)
            self.on_end()
            # The call holds this response (its on_reply) as this held the call: without that
            # cycle, both are freed as the request ends, not by the garbage collector.
            self.cancel = nothing
        if reply is None:
            if self.left:
                log.info("client disconnected before its reply; the call is cancelled")
                return
            reply = cancelled_reply(self.ident)
        else:
            reply = jsonrpc.with_id(reply, self.ident)
        body = jsonrpc.encode(reply)
        headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
        status = reply_status(reply, modern=self.modern)
        respond = extensions.get(RESPOND_HOOK)
        if respond is not None and respond(scope, status, headers, body):
            return  # written whole, at once (connections)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _watched(self, receive: Receive) -> Frame | None:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await until_disconnect(receive)
                self._disconnected()

            tg.start_soon(watch)
            reply = await self.reply_frame
            tg.cancel_scope.cancel()
        return reply


REQUEST_TIMEOUT = -32001  # the code SDKs use for a request that timed out


def timed_out_reply(ident: Any, method: str | None, seconds: float, *, modern: bool) -> Frame:
    """The answer to a request the request timeout cut (logged at warn): a tool error for a
    tools/call (in the client's era: `resultType` is 2026-07-28's), the SDKs' timeout error for
    anything else."""
    message = (
        f"{method} got no answer within {seconds:g} s (the request timeout, --request-timeout); "
        "it was cancelled upstream"
    )
    log.warning("request timed out", extra={"method": method, "seconds": seconds})
    if method == "tools/call":
        body = jsonrpc.tool_error_result(message)
        if not modern:
            del body["resultType"]
        return jsonrpc.result(ident, body)
    return jsonrpc.error(ident, REQUEST_TIMEOUT, message)


def cancelled_reply(ident: Any) -> Frame:
    return jsonrpc.error(ident, jsonrpc.INTERNAL_ERROR, "the request was cancelled")


class ReplyStream(Response):
    """An SSE response scoped to one request: its notifications (progress), then its reply.
    `answer` is called with the stream's writer, where the request's own notifications go.

    Not resumable (2026-07-28, stateless): closing the stream cancels the call. Resumable
    (a session-era session): the call goes on and its events wait in the session's event log
    for a GET with `Last-Event-ID`. `answer` is also given the stream's `cut`, for an upstream
    that closes its own stream for the call mid-call: a primed (2025-11-25) stream then ends
    there too, once it has written what came before, as SEP-1699 lets a server do, and its
    client resumes it; with `poll_after`, a primed stream is cut that many seconds after it
    opened if its reply has not come by then (SEP-1699's polling, `--sse-poll-after`)."""

    def __init__(
        self,
        answer: Callable[[ProgressSink, StreamCut], Awaitable[Frame | None]],
        stream: EventLog,
        *,
        resumable: bool,
        prime: bool = False,
        rewrite: Callable[[Frame], Frame] | None = None,
        headers: dict[str, str] | None = None,
        poll_after: float | None = None,
    ) -> None:
        super().__init__(media_type="text/event-stream", headers={"Cache-Control": "no-store", **(headers or {})})
        _streaming(self)
        self.answer = answer
        self.stream = stream
        self.resumable = resumable
        self.prime = prime
        self.rewrite = rewrite
        self.poll_after = poll_after
        self._cut = Cut()

    def cut(self, why: str = "an upstream closed its stream for the call mid-call") -> None:
        """An upstream closed its stream for this call before the reply (and resumes it): end
        the client's connection too once it has every event so far, where the client can resume
        it (a primed stream: it holds an event id). The call goes on; its reply waits in the log
        for the client's GET with Last-Event-ID. A second cut, or one after the connection
        ended, changes nothing."""
        if self.resumable and self.prime and self._cut.at is None:
            self._cut.at = self.stream.last
            self.stream.nudge()
            log.info(
                "a request's stream ends before its reply, to be resumed with Last-Event-ID",
                extra={"stream": self.stream.stream_id, "why": why},
            )

    async def _poll(self) -> None:
        assert self.poll_after is not None
        await anyio.sleep(self.poll_after)
        self.cut(f"no reply within --sse-poll-after ({self.poll_after:g} s)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream, rewrite = self.stream, self.rewrite
        produced = anyio.Event()

        async def push(frame: Frame) -> None:
            stream.append(jsonrpc.encode(rewrite(frame) if rewrite is not None else frame))

        async def produce() -> None:
            try:
                reply = await self.answer(push, self.cut)
                if reply is not None:
                    stream.append(jsonrpc.encode(reply))
            finally:
                stream.close()
                produced.set()

        writing = anyio.CancelScope()

        async def write() -> None:
            delivered = False
            with writing:
                delivered = await _write_events(send, stream, 0, ids=self.resumable, prime=self.prime, cut=self._cut)
            if not delivered and self.resumable:
                await produced.wait()  # the session-era call goes on; its events wait for Last-Event-ID
            tg.cancel_scope.cancel()

        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with anyio.create_task_group() as tg:
            tg.start_soon(produce)
            tg.start_soon(write)
            if self.poll_after is not None and self.resumable and self.prime:
                tg.start_soon(self._poll)
            await until_disconnect(receive)
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
                await until_disconnect(receive)
                tg.cancel_scope.cancel()
        except OSError:
            pass
        finally:
            entry.busy -= 1
            entry.touch()
