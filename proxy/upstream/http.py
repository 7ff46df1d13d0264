"""One remote upstream MCP server over HTTP, in whichever of the three HTTP transports it speaks.

Detection follows the spec (basic/versioning, basic/transports):

1. **2026-07-28**: POST `server/discover` with the modern headers. A DiscoverResult naming the
   version makes the upstream modern: every request is its own POST, answered as JSON or as an
   SSE stream scoped to the request (its progress, then the reply); closing that stream is the
   cancellation (http_modern).
2. **Streamable HTTP, session era** (2025-03-26 … 2025-11-25): any other answer, or a 400/404/405
   whose body is not a recognised modern error. `initialize` (the client's, passed through, or
   the proxy's) opens a session whose `Mcp-Session-Id` rides on every later request, with the
   negotiated `MCP-Protocol-Version`; a 404 means the session ended and it is initialized again;
   the standalone GET stream carries server requests and notifications when the server offers
   one; replies to server requests are POSTed; `notifications/cancelled` cancels; DELETE ends it
   (http_session).
3. **HTTP+SSE** (2024-11-05): when the POST is refused (404/405) without a JSON-RPC body and a
   GET opens an event stream whose first event is `endpoint`, messages are POSTed there and
   everything the server says arrives as `message` events on that one stream (http_sse).

    PostExchange (http_modern)       one POST and its reply, the 2026-07-28 headers, the words
    ├── SessionMode (http_session)   session, re-initialize, resumption, the standalone stream
    ├── SseMode (http_sse)           the 2024-11-05 event stream and its endpoint
    └── HttpUpstreamConnection       detection, lifetime, and each message sent the way its mode
                                     wants (the connection everyone uses)

Any 2026-07-28-only rule the forwarded messages need (headers) is set by this connection
(http_modern); `_meta` is the link's. Nothing here logs a header value or a payload; the URL is
shown without credentials or query values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.to_thread
import httpx2

from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.headers import modern_headers
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream import http_wire as wire
from frugal_proxy.upstream.base import (
    START_UP_DEADLINE,
    CutHandler,
    NotificationHandler,
    Pending,
    ProgressHandler,
    RelatedHandler,
    ServerRequestHandler,
    discovered,
)
from frugal_proxy.upstream.http_modern import STREAMING_METHODS, Mode, Refused
from frugal_proxy.upstream.http_session import SessionMode, session_ended
from frugal_proxy.upstream.http_sse import SseMode

log = logging.getLogger("frugal_proxy.upstream")

MODERN_ERRORS = frozenset(
    {jsonrpc.HEADER_MISMATCH, jsonrpc.MISSING_CLIENT_CAPABILITY, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION}
)
SPOKEN_FOR = frozenset({401, 403, 413, 429})  # statuses whose meaning is the status, whatever the body says


class HttpUpstreamConnection(SessionMode, SseMode):
    """A reconnecting connection to one remote MCP server."""

    RETRY_VERB = "reconnects"

    def __init__(
        self,
        url: str,
        *,
        name: str,
        headers: dict[str, str] | None = None,
        probe_timeout: float = 3.0,
        connect_timeout: float = 10.0,
        read_timeout: float = 300.0,
        max_message_bytes: int = 64 * 1024 * 1024,
        unreachable_advice: str | None = None,
        on_server_request: ServerRequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport` replaces the network under the HTTP client (httpx2's transport seam; None:
        the real one)."""
        super().__init__(
            name=name,
            probe_timeout=probe_timeout,
            on_server_request=on_server_request,
            on_notification=on_notification,
        )
        self.url = url
        self.safe_url = wire.safe_url(url)
        self.headers = dict(headers or {})
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_message_bytes = max_message_bytes
        self.unreachable_advice = unreachable_advice
        self.mode: Mode | None = None
        self._client: httpx2.AsyncClient | None = None
        self._alive = False
        self._closed = False
        self._pending: dict[int, Pending] = {}  # replies that arrive on a GET stream
        self._stream_scope: anyio.CancelScope | None = None
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}  # 2026-07-28 (http_modern)
        self._session_id: str | None = None  # the session era (http_session)
        self._session_version: str | None = None
        self._session_lock = anyio.Lock()
        self._post_url: str | None = None  # HTTP+SSE (http_sse): where messages go
        self._found: dict[str, Any] | None = None  # what the last detection's discover found
        self._transport = transport

    # -- lifetime --------------------------------------------------------------------------------

    async def __aenter__(self) -> HttpUpstreamConnection:
        # Building the client loads the TLS trust store: file reads, kept off the event loop.
        self._client = await anyio.to_thread.run_sync(self._make_client)
        await super().__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        try:
            return await super().__aexit__(*exc_info)
        finally:
            if self._client is not None:
                with anyio.CancelScope(shield=True):
                    await self._client.aclose()

    def _make_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            transport=self._transport,
            headers=self.headers,
            timeout=httpx2.Timeout(self.connect_timeout, read=self.read_timeout),
            follow_redirects=False,
        )

    @property
    def running(self) -> bool:
        return self._alive

    def state(self) -> dict[str, object]:
        if self._alive:
            transport = {"modern": "streamable-http", "streamable": "streamable-http", "sse": "http+sse"}
            return {
                "state": "up",
                "era": self.era,
                "url": self.safe_url,
                "transport": transport[self.mode or "modern"],
                "reconnects": self.generation - 1,
            }
        return self._down_state()

    async def shutdown(self) -> None:
        """End the session (DELETE, when there is one) and close the streams."""
        if self._closed:
            return
        self._closed = True
        self._alive = False
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        await self._end_session()
        self._fail_pending(UpstreamDown(self.name, "the proxy is shutting down", [], verb=self.RETRY_VERB))

    async def _start(self) -> None:
        self._closed = False
        self._found = await self._detect()
        self.generation += 1
        self._failures = 0
        self._alive = True
        log.info("upstream connected", extra={"upstream": self.name, "url": self.safe_url, "transport": self.mode})
        await self._negotiate()

    async def _discover(self) -> dict[str, Any] | None:
        return self._found  # the probe is the detection: a modern POST opens no session to lose

    def _address_in_session_era(self) -> None:
        if self.mode == "modern":
            self.mode = "streamable"  # a dual-era server: its session era, for a session-era client

    def _become_modern(self, discovered: dict[str, Any]) -> None:
        super()._become_modern(discovered)
        self.mode = "modern"

    async def _before_reinitialize(self) -> None:
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        await self._end_session()  # the next initialize opens a new session

    def _lost(self, reason: str, *, retry_after: float | None = None) -> UpstreamDown:
        """Mark it down (the next request reconnects, after the backoff) and fail what waits."""
        if self._alive:
            log.warning("upstream lost", extra={"upstream": self.name, "reason": reason})
        self._alive = False
        self._session_id = None
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        self._record_down(reason, [], at_least=retry_after or 0.0)
        down = self._down_error()
        self._fail_pending(down)
        return down

    def _fail_pending(self, failure: Exception) -> None:
        for pending in self._pending.values():
            pending.failure = failure
            pending.set_done()
        self._pending.clear()

    # -- detection -------------------------------------------------------------------------------

    async def _detect(self) -> dict[str, Any] | None:
        """Find the transport and era; the DiscoverResult of a modern server, else None."""
        probe_id = next(self._ids)
        params = self.discover_params()
        frame = jsonrpc.request(probe_id, "server/discover", params)
        headers = modern_headers("server/discover", params, {})
        try:
            try:
                reply = await self._post(frame, headers, probe_id, read_timeout=self.probe_timeout)
            except httpx2.ReadTimeout:
                # Connected, and no answer yet: a server that is slow to start (or busy) is not a
                # session-era one; it gets the rest of the start-up deadline to answer.
                log.info(
                    "server/discover timed out; asking again, up to the start-up deadline",
                    extra={"upstream": self.name, "seconds": self.probe_timeout, "deadline": START_UP_DEADLINE},
                )
                wait = max(START_UP_DEADLINE - self.probe_timeout, self.probe_timeout)
                reply = await self._post(frame, headers, probe_id, read_timeout=wait)
        except Refused as refused:
            return await self._after_refused_probe(refused)
        except httpx2.ReadTimeout:
            log.warning(
                "server/discover got no answer within the start-up deadline; serving the upstream in the session era",
                extra={"upstream": self.name, "deadline": START_UP_DEADLINE},
            )
            self.mode = "streamable"
            return None
        except httpx2.TransportError as exc:
            raise self._unreachable(exc) from None
        except UpstreamError as exc:
            raise self._down(str(exc).removeprefix(f"upstream {self.name!r} ")) from None
        found = discovered(reply)
        self.mode = "modern" if found is not None else "streamable"
        return found

    async def _after_refused_probe(self, refused: Refused) -> dict[str, Any] | None:
        status = refused.status
        if status in (400, 404, 405):
            problem = jsonrpc.error_of(refused.frame) if refused.frame is not None else None
            if problem is not None and problem[0] in MODERN_ERRORS and not _handshake_only(refused.frame):
                raise self._down(f"it speaks 2026-07-28 but refused the proxy's server/discover: {problem[1][:200]}")
            if refused.frame is None and status in (404, 405) and await self._try_sse():
                self.mode = "sse"
                return None
            self.mode = "streamable"
            return None
        raise self._down(self._refusal_text(refused, "server/discover"), retry_after=refused.retry_after)

    async def _try_sse(self) -> bool:
        """Open a 2024-11-05 event stream, if the URL is one; True once its endpoint is known."""
        assert self._tg is not None
        try:
            await self._tg.start(self._sse_stream)
        except (Refused, httpx2.TransportError, UpstreamError, TimeoutError) as exc:
            log.info("no HTTP+SSE stream either", extra={"upstream": self.name, "reason": type(exc).__name__})
            return False
        return True

    def _down(self, reason: str, *, retry_after: float | None = None) -> UpstreamDown:
        self._record_down(reason, [], at_least=retry_after or 0.0)
        return self._down_error()

    def _unreachable(self, exc: httpx2.TransportError) -> UpstreamDown:
        return self._lost(
            wire.describe_transport_error(exc, self.safe_url, self.connect_timeout, self.unreachable_advice)
        )

    # -- requests --------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_progress: ProgressHandler | None = None,
        on_related: RelatedHandler | None = None,
        headers: Mapping[str, str] | None = None,
        on_cut: CutHandler | None = None,
    ) -> Frame:
        """Send a request and wait for its reply frame (a result or an error); `headers` are the
        client's `Mcp-Param-*` headers, forwarded as they came where the proxy does not set them;
        `on_cut` is told when the server closes the request's stream before its reply, which is
        then resumed with Last-Event-ID (the session era).

        Raises UpstreamDown when the server cannot be reached, UpstreamError when it answers
        with an HTTP error, garbage or a reply over the size cap. Cancelling the caller cancels
        the request upstream (the stream closed, or `notifications/cancelled`).
        """
        if not self._alive:
            raise self._down_error()
        upstream_id, params, pending = self._open(params, on_progress, on_related, method)
        try:
            if self.mode == "sse":
                reply = await self._request_over_sse(upstream_id, method, params, pending)
            else:
                reply = await self._request_over_post(upstream_id, method, params, headers, pending, on_cut)
        finally:
            self._close(upstream_id, pending)
        self._learn(method, reply)
        return reply

    async def _request_over_post(
        self,
        upstream_id: int,
        method: str,
        params: Any,
        forwarded: Mapping[str, str] | None,
        pending: Pending,
        on_cut: CutHandler | None = None,
    ) -> Frame:
        """One request POSTed. Cancelled, a session-era request that went out is followed by
        `notifications/cancelled`, and one that never left (waiting for a connection, say) by
        nothing; a 2026-07-28 request is cancelled by closing its response, which leaving the
        POST does (the spec defines no client notifications there)."""
        frame = jsonrpc.request(upstream_id, method, params)
        read_timeout = None if method in STREAMING_METHODS else self.read_timeout
        for attempt in (1, 2):
            session = self._session_id
            try:
                reply = await self._post(
                    frame,
                    self._headers_for(method, params, forwarded),
                    upstream_id,
                    read_timeout,
                    on_sent=pending.mark_sent,
                    on_cut=on_cut,
                )
            except Refused as refused:
                renewable = self.mode == "streamable" and method != "initialize" and self.initialize_params is not None
                if session_ended(refused) and renewable and session is not None and attempt == 1:
                    pending.mark_refused()  # not served: it goes again in a new session
                    await self._renew_session(session)
                    continue
                if refused.frame is not None and refused.status < 500 and refused.status not in SPOKEN_FOR:
                    return jsonrpc.with_id(refused.frame, upstream_id)  # the server's own answer
                pending.mark_refused()
                raise self._refusal(refused, method) from None
            except anyio.get_cancelled_exc_class():
                if self.mode == "streamable" and pending.sent:
                    with anyio.CancelScope(shield=True):
                        await self._send_cancel(upstream_id)
                raise
            except httpx2.ReadTimeout:
                raise UpstreamError(
                    f"upstream {self.name!r} sent nothing for {read_timeout:g} s ({self.safe_url});"
                    " the request was abandoned"
                ) from None
            except httpx2.TransportError as exc:
                raise self._unreachable(exc) from None
            assert reply is not None
            return reply
        raise AssertionError("unreachable")

    async def notify(self, method: str, params: Any = None) -> None:
        if not self._alive:
            raise self._down_error()
        if self.mode == "modern":
            return  # 2026-07-28 over HTTP defines no client-to-server notifications
        await self._post_message(jsonrpc.notification(method, params))

    async def send_reply(self, frame: Frame) -> None:
        """Answer a server-to-client request (session era: POSTed like any message)."""
        if not self._alive or self.mode == "modern":
            return
        try:
            await self._post_message(frame)
        except UpstreamError as exc:
            log.warning("a reply did not reach the upstream", extra={"upstream": self.name, "reason": str(exc)})

    async def _send_cancel(self, upstream_id: int) -> None:
        self._abandoned.add(upstream_id)
        params = {"requestId": upstream_id, "reason": "cancelled by the client"}
        try:
            with anyio.move_on_after(self.connect_timeout):
                await self._post_message(jsonrpc.notification("notifications/cancelled", params))
        except UpstreamError:
            pass  # it is gone; nothing left to cancel

    async def _post_message(
        self, frame: Frame, on_sent: Callable[[], None] | None = None, on_refused: Callable[[], None] | None = None
    ) -> None:
        """POST a notification or a reply (session era), or an HTTP+SSE request; it is accepted
        without an answer. `on_sent` as for `_post`; `on_refused` is told of a failure status."""
        url = self._post_url if self.mode == "sse" else None
        method = jsonrpc.method_of(frame) or "a reply"
        try:
            await self._post(frame, self._headers_for(method, None), None, self.read_timeout, url=url, on_sent=on_sent)
        except Refused as refused:
            if on_refused is not None:
                on_refused()
            raise self._refusal(refused, method) from None
        except httpx2.TransportError as exc:
            raise self._unreachable(exc) from None

    def _headers_for(self, method: str, params: Any, forwarded: Mapping[str, str] | None = None) -> dict[str, str]:
        if self.mode == "modern":
            return self._modern_headers(method, params, forwarded)
        if self.mode == "streamable" and method != "initialize":
            return self._session_headers(self._session_id)
        return {}


def _handshake_only(frame: Frame | None) -> bool:
    """An unsupported-version error whose `supported` list names no modern version."""
    if frame is None:
        return False
    body = jsonrpc.decode_any(frame["error"]) if "error" in frame else None
    data = body.get("data") if isinstance(body, dict) else None
    supported = data.get("supported") if isinstance(data, dict) else None
    return isinstance(supported, list) and not any(version in eras.MODERN_VERSIONS for version in supported)
