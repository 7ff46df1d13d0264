"""One remote upstream MCP server over HTTP, in whichever of the three HTTP transports it speaks.

Detection follows the spec (basic/versioning, basic/transports):

1. **2026-07-28**: POST `server/discover` with the modern headers. A DiscoverResult naming the
   version makes the upstream modern: every request is its own POST, answered as JSON or as an
   SSE stream scoped to the request (its progress, then the reply); closing that stream is the
   cancellation.
2. **Streamable HTTP, session era** (2025-03-26 … 2025-11-25): any other answer, or a 400/404/405
   whose body is not a recognised modern error. `initialize` (the client's, passed through, or
   the proxy's) opens a session whose `Mcp-Session-Id` rides on every later request, with the
   negotiated `MCP-Protocol-Version`; a 404 means the session ended and it is initialized again;
   the standalone GET stream carries server requests and notifications when the server offers
   one; replies to server requests are POSTed; `notifications/cancelled` cancels; DELETE ends it.
3. **HTTP+SSE** (2024-11-05): when the POST is refused (404/405) without a JSON-RPC body and a
   GET opens an event stream whose first event is `endpoint`, messages are POSTed there and
   everything the server says arrives as `message` events on that one stream.

Any 2026-07-28-only rule the forwarded messages need (headers) is set here; `_meta` is the
link's. Nothing here logs a header value or a payload; the URL is shown without credentials or
query values.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from typing import Any, Literal

import anyio
import anyio.abc
import anyio.to_thread
import httpx2

from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.headers import learn_param_headers, modern_headers
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream import http_wire as wire
from frugal_proxy.upstream.base import (
    NotificationHandler,
    Pending,
    ProgressHandler,
    RelatedHandler,
    ServerRequestHandler,
    UpstreamBase,
    discovered,
)

log = logging.getLogger("frugal_proxy.upstream")

Mode = Literal["modern", "streamable", "sse"]
MODERN_ERRORS = frozenset(
    {jsonrpc.HEADER_MISMATCH, jsonrpc.MISSING_CLIENT_CAPABILITY, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION}
)
STREAMING_METHODS = frozenset({"subscriptions/listen"})  # open for as long as the client listens
RESUME_ATTEMPTS = 5
MAX_ERROR_BODY = 64 * 1024
DELETE_SECONDS = 2.0
SPOKEN_FOR = frozenset({401, 403, 413, 429})  # statuses whose meaning is the status, whatever the body says


class _Refused(Exception):
    """A non-2xx answer; `frame` is the JSON-RPC error in its body, if there was one."""

    def __init__(self, status: int, phrase: str, frame: Frame | None, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.phrase = phrase
        self.frame = frame
        self.retry_after = retry_after


class HttpUpstreamConnection(UpstreamBase):
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
        on_server_request: ServerRequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> None:
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
        self.mode: Mode | None = None
        self._client: httpx2.AsyncClient | None = None
        self._alive = False
        self._closed = False
        self._session_id: str | None = None
        self._session_version: str | None = None
        self._session_lock = anyio.Lock()
        self._post_url: str | None = None  # HTTP+SSE: where messages go
        self._pending: dict[int, Pending] = {}  # replies that arrive on a GET stream
        self._stream_scope: anyio.CancelScope | None = None
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}

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
        session, self._session_id = self._session_id, None
        if self.mode == "streamable" and session is not None and self._client is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(DELETE_SECONDS):
                try:
                    await self._client.delete(self.url, headers=self._session_headers(session))
                except httpx2.HTTPError:
                    pass  # the server will expire the session itself
        self._fail_pending(UpstreamDown(self.name, "the proxy is shutting down", [], verb=self.RETRY_VERB))

    async def _start(self) -> None:
        self._closed = False
        found = await self._detect()
        self.generation += 1
        self._failures = 0
        self._alive = True
        log.info("upstream connected", extra={"upstream": self.name, "url": self.safe_url, "transport": self.mode})
        await self._settle(found)

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
            pending.done.set()
        self._pending.clear()

    # -- detection -------------------------------------------------------------------------------

    async def _detect(self) -> dict[str, Any] | None:
        """Find the transport and era; the DiscoverResult of a modern server, else None."""
        probe_id = next(self._ids)
        params = self.discover_params()
        frame = jsonrpc.request(probe_id, "server/discover", params)
        headers = modern_headers("server/discover", params, {})
        try:
            reply = await self._post(frame, headers, probe_id, read_timeout=self.probe_timeout)
        except _Refused as refused:
            return await self._after_refused_probe(refused)
        except httpx2.ReadTimeout:
            log.info("server/discover timed out; trying the session era", extra={"upstream": self.name})
            self.mode = "streamable"
            return None
        except httpx2.TransportError as exc:
            raise self._unreachable(exc) from None
        except UpstreamError as exc:
            raise self._down(str(exc).removeprefix(f"upstream {self.name!r} ")) from None
        found = discovered(reply)
        self.mode = "modern" if found is not None else "streamable"
        return found

    async def _after_refused_probe(self, refused: _Refused) -> dict[str, Any] | None:
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
        except (_Refused, httpx2.TransportError, UpstreamError, TimeoutError) as exc:
            log.info("no HTTP+SSE stream either", extra={"upstream": self.name, "reason": type(exc).__name__})
            return False
        return True

    def _down(self, reason: str, *, retry_after: float | None = None) -> UpstreamDown:
        self._record_down(reason, [], at_least=retry_after or 0.0)
        return self._down_error()

    def _unreachable(self, exc: httpx2.TransportError) -> UpstreamDown:
        return self._lost(wire.describe_transport_error(exc, self.safe_url, self.connect_timeout))

    # -- requests --------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_progress: ProgressHandler | None = None,
        on_related: RelatedHandler | None = None,
    ) -> Frame:
        """Send a request and wait for its reply frame (a result or an error).

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
                reply = await self._request_over_post(upstream_id, method, params)
        finally:
            self._close(upstream_id, pending)
        if method == "tools/list" and self.mode == "modern":
            learn_param_headers(reply, self._param_headers)
        return reply

    async def _request_over_post(self, upstream_id: int, method: str, params: Any) -> Frame:
        frame = jsonrpc.request(upstream_id, method, params)
        read_timeout = None if method in STREAMING_METHODS else self.read_timeout
        for attempt in (1, 2):
            session = self._session_id
            try:
                reply = await self._post(frame, self._headers_for(method, params), upstream_id, read_timeout)
            except _Refused as refused:
                renewable = self.mode == "streamable" and method != "initialize" and self.initialize_params is not None
                if _session_ended(refused) and renewable and session is not None and attempt == 1:
                    await self._renew_session(session)
                    continue
                if refused.frame is not None and refused.status < 500 and refused.status not in SPOKEN_FOR:
                    return jsonrpc.with_id(refused.frame, upstream_id)  # the server's own answer
                raise self._refusal(refused, method) from None
            except anyio.get_cancelled_exc_class():
                if self.mode == "streamable":
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

    async def _request_over_sse(self, upstream_id: int, method: str, params: Any, pending: Pending) -> Frame:
        self._pending[upstream_id] = pending
        try:
            await self._post_message(jsonrpc.request(upstream_id, method, params))
            with anyio.fail_after(None if method in STREAMING_METHODS else self.read_timeout):
                await pending.done.wait()
        except TimeoutError:
            self._pending.pop(upstream_id, None)
            self._abandoned.add(upstream_id)
            raise UpstreamError(
                f"upstream {self.name!r} did not answer {method} within {self.read_timeout:g} s ({self.safe_url})"
            ) from None
        except anyio.get_cancelled_exc_class():
            if self._pending.pop(upstream_id, None) is not None:
                self._abandoned.add(upstream_id)
                with anyio.CancelScope(shield=True):
                    await self._send_cancel(upstream_id)
            raise
        finally:
            self._pending.pop(upstream_id, None)
        if pending.failure is not None:
            raise pending.failure
        assert pending.reply is not None
        return pending.reply

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

    async def _post_message(self, frame: Frame) -> None:
        """POST a notification or a reply (session era); it is accepted without an answer."""
        url = self._post_url if self.mode == "sse" else None
        method = jsonrpc.method_of(frame) or "a reply"
        try:
            await self._post(frame, self._headers_for(method, None), None, self.read_timeout, url=url)
        except _Refused as refused:
            raise self._refusal(refused, method) from None
        except httpx2.TransportError as exc:
            raise self._unreachable(exc) from None

    def _headers_for(self, method: str, params: Any) -> dict[str, str]:
        if self.mode == "modern":
            return modern_headers(method, params, self._param_headers, wire.FORWARDED_PARAMS.get())
        if self.mode == "streamable" and method != "initialize":
            return self._session_headers(self._session_id)
        return {}

    def _session_headers(self, session: str | None) -> dict[str, str]:
        headers = {}
        if session is not None:
            headers["Mcp-Session-Id"] = session
        if self._session_version is not None:
            headers["MCP-Protocol-Version"] = self._session_version
        return headers

    # -- one POST --------------------------------------------------------------------------------

    async def _post(
        self,
        frame: Frame,
        headers: dict[str, str],
        upstream_id: int | None,
        read_timeout: float | None,
        *,
        url: str | None = None,
    ) -> Frame | None:
        """POST one message. For a request, wait for its reply (JSON, or SSE with the stream's
        other messages delivered on the way, resumed when the server supports it); None for a
        notification or a reply. Raises _Refused, httpx2.TransportError or UpstreamError."""
        assert self._client is not None
        timeout = httpx2.Timeout(self.connect_timeout, read=read_timeout, write=self.read_timeout)
        headers = {"Accept": wire.ACCEPT_BOTH, "Content-Type": "application/json", **headers}
        body = jsonrpc.encode(frame)
        async with self._client.stream(
            "POST", url or self.url, content=body, headers=headers, timeout=timeout
        ) as response:
            await self._check(response)
            session = response.headers.get("mcp-session-id")
            if session is not None and self.mode == "streamable" and self._session_id is None:
                self._session_id = session
            if upstream_id is None:
                return None
            kind = wire.content_type(response)
            if kind == "application/json":
                return await self._json_reply(response, upstream_id)
            if kind == "text/event-stream":
                reply, last_event, retry = await self._stream_reply(response, upstream_id)
            else:
                raise self._garbage(kind or "no content type", response.status_code)
        if reply is None and last_event and self.mode == "streamable":
            reply = await self._resume(upstream_id, last_event, retry)
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
        raise _Refused(response.status_code, response.reason_phrase, frame, wire.retry_after(response))

    async def _json_reply(self, response: httpx2.Response, upstream_id: int) -> Frame:
        try:
            body = await wire.read_body(response, self.max_message_bytes)
        except wire.BodyTooLarge:
            raise self._too_large() from None
        try:
            frames = list(wire.frames_of(body))
        except wire.NotJsonRpc:
            raise self._garbage("application/json", response.status_code) from None
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
            return None
        reply = None
        for frame in frames:
            if upstream_id is not None and jsonrpc.is_reply(frame) and jsonrpc.id_of(frame) == upstream_id:
                reply = frame
            else:
                await self._deliver(frame, self._pending)
        return reply

    async def _resume(self, upstream_id: int, last_event: str, retry: int | None) -> Frame | None:
        """Pick up a request's stream where it broke (GET with Last-Event-ID), as the server asked."""
        assert self._client is not None
        for _ in range(RESUME_ATTEMPTS):
            await anyio.sleep((retry or 1000) / 1000)
            headers = {
                "Accept": "text/event-stream",
                "Last-Event-ID": last_event,
                **self._session_headers(self._session_id),
            }
            timeout = httpx2.Timeout(self.connect_timeout, read=self.read_timeout)
            async with self._client.stream("GET", self.url, headers=headers, timeout=timeout) as response:
                if response.status_code != 200 or wire.content_type(response) != "text/event-stream":
                    return None
                reply, newer, hint = await self._stream_reply(response, upstream_id)
            if reply is not None:
                return reply
            last_event, retry = newer or last_event, hint if hint is not None else retry
        return None

    # -- sessions and streams --------------------------------------------------------------------

    async def _initialized(self, result: dict[str, Any]) -> None:
        version = result.get("protocolVersion")
        self._session_version = version if isinstance(version, str) and version.isascii() else None
        if self.mode == "streamable" and self._session_id is not None and self._tg is not None:
            self._tg.start_soon(self._standalone_stream, self._session_id)

    async def _renew_session(self, stale: str) -> None:
        """The server ended the session (404): initialize again with the same params."""
        async with self._session_lock:
            if self._session_id != stale:
                return  # another request renewed it already
            log.info("upstream session ended; initializing again", extra={"upstream": self.name})
            self._session_id = None
            if self._stream_scope is not None:
                self._stream_scope.cancel()
            reply = await self._initialize(self.initialize_params)
            problem = jsonrpc.error_of(reply)
            if problem is not None:
                raise UpstreamError(f"upstream {self.name!r} refused a new session: {problem[1][:200]}")

    async def _standalone_stream(self, session: str) -> None:
        """The session's GET stream, while the server offers one: server requests and
        notifications that belong to no request. Reopened (with Last-Event-ID) when it ends."""
        assert self._client is not None
        scope = self._stream_scope = anyio.CancelScope()
        last_event, delay = "", 1.0
        with scope:
            while self._alive and self._session_id == session:
                headers = {"Accept": "text/event-stream", **self._session_headers(session)}
                if last_event:
                    headers["Last-Event-ID"] = last_event
                timeout = httpx2.Timeout(self.connect_timeout, read=None)
                try:
                    async with self._client.stream("GET", self.url, headers=headers, timeout=timeout) as response:
                        if response.status_code != 200 or wire.content_type(response) != "text/event-stream":
                            log.info(
                                "upstream offers no standalone stream",
                                extra={"upstream": self.name, "status": response.status_code},
                            )
                            return
                        async with aclosing(wire.events(response, self.max_message_bytes)) as stream:
                            async for event in stream:
                                last_event = event.id or last_event
                                delay = event.retry / 1000 if event.retry is not None else delay
                                await self._take_event(event, None)
                except (httpx2.TransportError, wire.BodyTooLarge) as exc:
                    log.info("standalone stream lost", extra={"upstream": self.name, "reason": type(exc).__name__})
                await anyio.sleep(delay)

    async def _sse_stream(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The 2024-11-05 event stream: its `endpoint` first, then every message of the server."""
        assert self._client is not None
        scope = self._stream_scope = anyio.CancelScope()
        reason = "the server closed the event stream"
        with scope:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
            timeout = httpx2.Timeout(self.connect_timeout, read=None)
            async with self._client.stream("GET", self.url, headers=headers, timeout=timeout) as response:
                await self._check(response)
                if wire.content_type(response) != "text/event-stream":
                    raise self._garbage(wire.content_type(response), response.status_code)
                async with aclosing(wire.events(response, self.max_message_bytes)) as stream:
                    with anyio.fail_after(self.probe_timeout):
                        first = await anext(stream, None)
                    if first is None or first.event != "endpoint":
                        raise UpstreamError(f"upstream {self.name!r} sent no endpoint event ({self.safe_url})")
                    endpoint = str(httpx2.URL(self.url).join(first.data.strip()))
                    if not wire.same_origin(endpoint, self.url):
                        # Our headers (credentials, say) go wherever the endpoint points: same origin only.
                        raise UpstreamError(f"upstream {self.name!r} named an endpoint on another origin; refused")
                    self._post_url = endpoint
                    task_status.started()
                    try:
                        async for event in stream:
                            await self._take_event(event, None)
                    except (httpx2.TransportError, wire.BodyTooLarge) as exc:
                        reason = f"the event stream from {self.safe_url} broke ({type(exc).__name__})"
        if not self._closed and not scope.cancel_called:
            self._lost(reason)

    # -- the words for what went wrong -----------------------------------------------------------

    def _refusal_text(self, refused: _Refused, method: str) -> str:
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

    def _refusal(self, refused: _Refused, method: str) -> UpstreamError:
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


def _session_ended(refused: _Refused) -> bool:
    """A 404 is the spec's word for an ended session; some servers (the TypeScript SDK's examples
    among them) say 400 with a message about the session id instead."""
    if refused.status == 404:
        return True
    problem = jsonrpc.error_of(refused.frame) if refused.frame is not None else None
    return refused.status == 400 and problem is not None and "session" in problem[1].lower()


def _handshake_only(frame: Frame | None) -> bool:
    """An unsupported-version error whose `supported` list names no modern version."""
    if frame is None:
        return False
    body = jsonrpc.decode_any(frame["error"]) if "error" in frame else None
    data = body.get("data") if isinstance(body, dict) else None
    supported = data.get("supported") if isinstance(data, dict) else None
    return isinstance(supported, list) and not any(version in eras.MODERN_VERSIONS for version in supported)
