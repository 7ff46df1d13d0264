"""The 2024-11-05 HTTP+SSE transport, beside the Streamable HTTP endpoint, for clients that
predate it.

    GET /sse                            opens a session: its first event, `endpoint`, names the
                                        URL to POST to; every message for the client (replies
                                        included) follows as a `message` event
    POST /messages?session_id=ID        one JSON-RPC message (or a batch) from the client: 202,
                                        its answer comes on the stream

The connection is the session: when the GET stream closes, the session ends and its upstream
connections shut down. Each such session is an HttpSession like a Streamable HTTP one (its own
Router and upstreams), so `--max-sessions` bounds both together. Not served with `--stateless`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.router.router import Router
from frugal_proxy.server.guard import operator_of, read_messages
from frugal_proxy.server.sessions import SESSIONS_FULL, HttpSession, HttpSessions
from frugal_proxy.server.streams import until_disconnect

log = logging.getLogger("frugal_proxy.http_legacy_sse")

SSE_PATH = "/sse"
MESSAGES_PATH = "/messages"
INBOX_SIZE = 256  # messages POSTed and not yet taken up by the session

# The endpoint's way of answering a request of a session (request timeout included).
Answer = Callable[[Router, Frame, Any, HttpSession | None], Awaitable[Frame]]


def _error(status: int, message: str, ident: Any = None, code: int = jsonrpc.INVALID_REQUEST) -> Response:
    log.warning("HTTP+SSE request refused: %s", message[:200], extra={"status": status})
    body = jsonrpc.encode(jsonrpc.error(ident, code, message))
    return Response(body, status, media_type="application/json")


class LegacySse:
    """The two routes of the 2024-11-05 transport over the endpoint's session-era sessions."""

    def __init__(self, sessions: HttpSessions, answer: Answer, body_cap: int) -> None:
        self.sessions = sessions
        self.answer = answer
        self.body_cap = body_cap
        self._inboxes: dict[str, MemoryObjectSendStream[Frame]] = {}

    def routes(self) -> list[Route]:
        return [
            Route(SSE_PATH, self.open_stream, methods=["GET"]),
            Route(MESSAGES_PATH, self.post_message, methods=["POST"]),
        ]

    async def open_stream(self, request: Request) -> Response:
        full = self.sessions.make_room()
        if full is not None:
            message, retry = full
            refused = _error(503, message, code=SESSIONS_FULL)
            refused.headers["Retry-After"] = str(retry)
            return refused
        # The session belongs to the token that opened it, and shares upstreams only within it.
        entry = await self.sessions.open(operator=operator_of(request))
        log.info("HTTP+SSE session started", extra={"sessions": len(self.sessions)})
        return _SessionStream(self, entry, f"{MESSAGES_PATH}?session_id={quote(entry.id)}")

    async def post_message(self, request: Request) -> Response:
        session_id = request.query_params.get("session_id")
        if session_id is None:
            return _error(400, "missing session_id: open GET /sse first and POST to the URL its endpoint event names")
        entry = self.sessions.get(session_id)
        inbox = self._inboxes.get(session_id)
        if entry is None or inbox is None:
            return _error(404, "unknown or ended session: open GET /sse again")
        if entry.session.operator != operator_of(request):
            return _error(403, "this session belongs to another operator: use the token that opened it")
        read = await read_messages(request, self.body_cap)
        if isinstance(read, Response):
            return read
        frames, _ = read
        entry.touch()
        for frame in frames:
            try:
                inbox.send_nowait(frame)
            except anyio.WouldBlock:
                return _error(429, "too many messages waiting for this session; wait for answers before sending more")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return _error(404, "the session ended: open GET /sse again")
        return Response(status_code=202)


class _SessionStream(Response):
    """The GET /sse stream: the endpoint event, then the session's messages; closing it ends
    the session."""

    def __init__(self, owner: LegacySse, entry: HttpSession, endpoint: str) -> None:
        super().__init__(media_type="text/event-stream", headers={"Cache-Control": "no-store"})
        self.raw_headers = [(key, value) for key, value in self.raw_headers if key != b"content-length"]
        self.owner = owner
        self.entry = entry
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        entry, owner = self.entry, self.owner
        inbox_send, inbox = anyio.create_memory_object_stream[Frame](INBOX_SIZE)
        owner._inboxes[entry.id] = inbox_send
        entry.busy += 1
        stream = entry.outbox.events.standalone
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            first = b"event: endpoint\ndata: " + self.endpoint.encode() + b"\n\n"
            await send({"type": "http.response.body", "body": first, "more_body": True})
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._serve, inbox, tg)

                async def write() -> None:
                    async for number, data in stream.follow(0):
                        body = b"event: message\ndata: " + data + b"\n\n"
                        await send({"type": "http.response.body", "body": body, "more_body": True})
                        stream.written(number)
                    tg.cancel_scope.cancel()

                tg.start_soon(write)
                await until_disconnect(receive)
                tg.cancel_scope.cancel()
        except OSError:
            pass
        finally:
            owner._inboxes.pop(entry.id, None)
            inbox_send.close()
            entry.busy -= 1
            owner.sessions.end(entry.id)
            log.info("HTTP+SSE session ended: its stream closed")

    async def _serve(self, inbox: Any, tg: anyio.abc.TaskGroup) -> None:
        """Take the client's messages in order; answer each request concurrently on the stream."""
        async with inbox:
            async for frame in inbox:
                if jsonrpc.is_request(frame):
                    tg.start_soon(self._answer, frame)
                else:
                    await self.entry.session.take_in(frame)

    async def _answer(self, frame: Frame) -> None:
        entry = self.entry
        reply = await self.owner.answer(entry.session, frame, jsonrpc.id_of(frame), entry)
        await entry.outbox.send(reply)
