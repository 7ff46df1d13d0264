"""2026-07-28 over HTTP, and the one POST the other two HTTP modes build on.

A 2026-07-28 server keeps no session: every request is its own POST, stamped with the headers
the server checks against the body (protocol/headers, with the `x-mcp-header` arguments learned
from `tools/list`), and answered as JSON or as an SSE stream scoped to the request (its progress
and other messages on the way, then the reply); closing that stream is the cancellation.
The session era (http_session) sends the same POSTs inside a session; HTTP+SSE (http_sse) POSTs
its messages to an endpoint and reads every answer from one event stream.

`PostExchange` is that one POST and its reply, the 2026-07-28 headers, and the words for what
went wrong; the connection's state is set up, and its mode chosen, by http.py.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any, Literal

import anyio
import httpx2

from frugal_proxy.errors import UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.headers import learn_param_headers, modern_headers
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream import http_wire as wire
from frugal_proxy.upstream.base import CutHandler, Pending, UpstreamBase, unusable_reply

log = logging.getLogger("frugal_proxy.upstream")

Mode = Literal["modern", "streamable", "sse"]
STREAMING_METHODS = frozenset({"subscriptions/listen"})  # open for as long as the client listens
MAX_ERROR_BODY = 64 * 1024


class Refused(Exception):
    """A non-2xx answer; `frame` is the JSON-RPC error in its body, if there was one."""

    def __init__(self, status: int, phrase: str, frame: Frame | None, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.phrase = phrase
        self.frame = frame
        self.retry_after = retry_after


class PostExchange(UpstreamBase):
    """One POST and its reply, for the HTTP connection (http.py), whatever its mode."""

    # Set up by HttpUpstreamConnection.__init__.
    url: str
    safe_url: str
    connect_timeout: float
    read_timeout: float
    max_message_bytes: int
    mode: Mode | None
    _client: httpx2.AsyncClient | None
    _alive: bool
    _closed: bool
    _pending: dict[int, Pending]  # requests whose reply arrives on a GET stream
    _stream_scope: anyio.CancelScope | None  # the GET stream open now
    _param_headers: dict[str, dict[tuple[str, ...], str]]  # the x-mcp-header arguments, by tool

    # -- what the session era adds (http_session) ------------------------------------------------

    @abc.abstractmethod
    def _took_response(self, response: httpx2.Response) -> None:
        """Keep what a POST's response says besides its body (the session era: the session id)."""

    @abc.abstractmethod
    async def _resume(
        self, upstream_id: int, last_event: str, retry: int | None, on_cut: CutHandler | None = None
    ) -> Frame | None:
        """The reply of a request whose event stream ended early, where the mode can resume it
        (`on_cut` told before each attempt)."""

    # -- 2026-07-28 ------------------------------------------------------------------------------

    def _modern_headers(self, method: str, params: Any, forwarded: Mapping[str, str] | None) -> dict[str, str]:
        return modern_headers(method, params, self._param_headers, forwarded)

    def _learn(self, method: str, reply: Frame) -> None:
        """Remember, from a modern server's tool list, which arguments its tools mirror as headers."""
        if method == "tools/list" and self.mode == "modern":
            learn_param_headers(reply, self._param_headers)

    # -- one POST --------------------------------------------------------------------------------

    async def _post(
        self,
        frame: Frame,
        headers: dict[str, str],
        upstream_id: int | None,
        read_timeout: float | None,
        *,
        url: str | None = None,
        on_sent: Callable[[], None] | None = None,
        on_cut: CutHandler | None = None,
    ) -> Frame | None:
        """POST one message. For a request, wait for its reply (JSON, or SSE with the stream's
        other messages delivered on the way, resumed when the server supports it); None for a
        notification or a reply. `on_sent` is called once the whole body has been handed to the
        connection (a request cancelled before that never reached the server); `on_cut` each
        time the stream ends before the reply and is resumed. Raises Refused,
        httpx2.TransportError or UpstreamError."""
        assert self._client is not None
        timeout = httpx2.Timeout(self.connect_timeout, read=read_timeout, write=self.read_timeout)
        headers = {"Accept": wire.ACCEPT_BOTH, "Content-Type": "application/json", **headers}
        body = jsonrpc.encode(frame)
        content: bytes | AsyncIterator[bytes] = body
        if on_sent is not None:
            # A stream of one chunk, with its length given so that it is not sent chunked: the
            # connection asks for the next chunk only once it has written this one.
            content = _then(body, on_sent)
            headers["Content-Length"] = str(len(body))
        async with self._client.stream(
            "POST", url or self.url, content=content, headers=headers, timeout=timeout
        ) as response:
            await self._check(response)
            self._took_response(response)
            if upstream_id is None:
                return None
            kind = wire.content_type(response)
            if kind == "application/json":
                return await self._json_reply(response, upstream_id)
            if kind == "text/event-stream":
                reply, last_event, retry = await self._stream_reply(response, upstream_id)
            else:
                raise self._garbage(kind or "no content type", response.status_code)
        if reply is None and last_event:
            reply = await self._resume(upstream_id, last_event, retry, on_cut)
        if reply is None:
            raise UpstreamError(f"upstream {self.name!r} closed the response stream before answering ({self.safe_url})")
        return reply

    async def _check(self, response: httpx2.Response) -> None:
        if 200 <= response.status_code < 300:
            return
        try:
            frame = wire.error_frame(await wire.read_body(response, MAX_ERROR_BODY))
        except (wire.BodyTooLarge, httpx2.HTTPError):
            frame = None
        raise Refused(response.status_code, response.reason_phrase, frame, wire.retry_after(response))

    async def _json_reply(self, response: httpx2.Response, upstream_id: int) -> Frame:
        try:
            body = await wire.read_body(response, self.max_message_bytes)
        except wire.BodyTooLarge:
            raise self._too_large() from None
        try:
            frames = list(wire.frames_of(body))
        except wire.NotJsonRpc as exc:
            if body.lstrip()[:1] not in (b"{", b"["):  # not JSON at all: an HTML page, say
                raise self._garbage("application/json", response.status_code) from None
            raise unusable_reply(self.name, str(exc)) from None
        reply = None
        for frame in frames:
            if jsonrpc.is_reply(frame) and jsonrpc.id_of(frame) == upstream_id:
                reply = frame
            else:
                await self._deliver(frame, {})
        if reply is None:
            raise UpstreamError(f"upstream {self.name!r} answered without a reply to the request ({self.safe_url})")
        return reply

    async def _stream_reply(self, response: httpx2.Response, upstream_id: int) -> tuple[Frame | None, str, int | None]:
        """Read a request's event stream up to its reply; also the last event id and retry hint,
        for resuming a stream that ends early."""
        last_event, retry = "", None
        try:
            async with aclosing(wire.events(response, self.max_message_bytes)) as stream:
                async for event in stream:
                    last_event = event.id or last_event
                    retry = event.retry if event.retry is not None else retry
                    reply = await self._take_event(event, upstream_id)
                    if reply is not None:
                        return reply, last_event, retry
        except wire.BodyTooLarge:
            raise self._too_large() from None
        return None, last_event, retry

    async def _take_event(self, event: wire.Event, upstream_id: int | None) -> Frame | None:
        """Deliver an event's messages; return the reply to `upstream_id` if it is among them."""
        if event.event != "message" or not event.data.strip():
            return None  # a priming event, or one the protocol does not define
        try:
            frames = list(wire.frames_of(event.data))
        except wire.NotJsonRpc as exc:
            log.warning(
                "upstream sent an event that is not JSON-RPC; dropped",
                extra={"upstream": self.name, "reason": str(exc)[:200]},
            )
            if upstream_id is not None and exc.error.reply and exc.error.request_id == upstream_id:
                raise unusable_reply(self.name, str(exc)) from None
            self._unusable(self._pending, exc.error)
            return None
        reply = None
        for frame in frames:
            if upstream_id is not None and jsonrpc.is_reply(frame) and jsonrpc.id_of(frame) == upstream_id:
                reply = frame
            else:
                await self._deliver(frame, self._pending)
        return reply

    # -- the words for what went wrong -----------------------------------------------------------

    def _refusal_text(self, refused: Refused, method: str) -> str:
        status, where = refused.status, self.safe_url
        if status in (401, 403):
            return (
                f"{where} refused the proxy's credentials (HTTP {status}); check the headers configured for it"
                " (not retried)"
            )
        if status == 429:
            later = f"retry after {refused.retry_after:.0f} s" if refused.retry_after is not None else "retry later"
            return f"{where} is rate limiting (HTTP 429); {later}"
        if status == 413:
            return f"{where} refused {method} as too large (HTTP 413)"
        if status >= 500:
            return f"{where} failed with HTTP {status} {refused.phrase}; the server's own error, try again later"
        problem = jsonrpc.error_of(refused.frame) if refused.frame is not None else None
        detail = f": {problem[1][:200]}" if problem is not None else ""
        return f"{where} answered {method} with HTTP {status} {refused.phrase}{detail}"

    def _refusal(self, refused: Refused, method: str) -> UpstreamError:
        return UpstreamError(
            f"upstream {self.name!r}: {self._refusal_text(refused, method)}",
            retry_after=refused.retry_after,
            permanent=refused.status in (401, 403),
        )

    def _garbage(self, kind: str, status: int) -> UpstreamError:
        return UpstreamError(
            f"upstream {self.name!r} answered with something that is not JSON-RPC ({kind}, HTTP {status})"
            f" from {self.safe_url}; check that the url is the server's MCP endpoint"
        )

    def _too_large(self) -> UpstreamError:
        return UpstreamError(
            f"upstream {self.name!r} sent a message over the {self.max_message_bytes}-byte cap; it was refused"
            " (raise limits.max_message_bytes, or --max-message-bytes, to accept it)"
        )


async def _then(body: bytes, on_sent: Callable[[], None]) -> AsyncIterator[bytes]:
    """`body` as a request stream that calls `on_sent` once it has been written."""
    yield body
    on_sent()
