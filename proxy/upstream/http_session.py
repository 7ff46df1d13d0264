"""Streamable HTTP in the session era (2025-03-26 … 2025-11-25): the POSTs of http_modern,
inside a session.

`initialize` (the client's, passed through, or the proxy's replay after a reconnect) opens a
session whose `Mcp-Session-Id` rides on every later request, with the negotiated
`MCP-Protocol-Version`; a 404 means the session ended and it is initialized again with the same
params; a request's event stream that ends early is resumed with `Last-Event-ID`; the standalone
GET stream carries server requests and notifications when the server offers one; replies to
server requests are POSTed; `notifications/cancelled` cancels; DELETE ends the session.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from typing import Any

import anyio
import httpx2

from frugal_proxy.errors import UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream import http_wire as wire
from frugal_proxy.upstream.base import CutHandler
from frugal_proxy.upstream.http_modern import PostExchange, Refused

log = logging.getLogger("frugal_proxy.upstream")

RESUME_ATTEMPTS = 5
DELETE_SECONDS = 2.0


class SessionMode(PostExchange):
    """The session-era part of the HTTP connection (http.py)."""

    # Set up by HttpUpstreamConnection.__init__.
    _session_id: str | None
    _session_version: str | None
    _session_lock: anyio.Lock  # one renewal at a time

    def _session_headers(self, session: str | None) -> dict[str, str]:
        headers = {}
        if session is not None:
            headers["Mcp-Session-Id"] = session
        if self._session_version is not None:
            headers["MCP-Protocol-Version"] = self._session_version
        return headers

    def _took_response(self, response: httpx2.Response) -> None:
        session = response.headers.get("mcp-session-id")
        if session is not None and self.mode == "streamable" and self._session_id is None:
            self._session_id = session

    async def _end_session(self) -> None:
        """End the session, when there is one (DELETE); the server expires it otherwise."""
        session, self._session_id = self._session_id, None
        if self.mode == "streamable" and session is not None and self._client is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(DELETE_SECONDS):
                try:
                    await self._client.delete(self.url, headers=self._session_headers(session))
                except httpx2.HTTPError:
                    pass  # the server will expire the session itself

    async def _resume(
        self, upstream_id: int, last_event: str, retry: int | None, on_cut: CutHandler | None = None
    ) -> Frame | None:
        """Pick up a request's stream where it broke (GET with Last-Event-ID), as the server asked;
        `on_cut` is told first each time (the client's own stream may close too)."""
        if self.mode != "streamable":
            return None
        assert self._client is not None
        for _ in range(RESUME_ATTEMPTS):
            if on_cut is not None:
                on_cut()
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


def session_ended(refused: Refused) -> bool:
    """A 404 is the spec's word for an ended session; some servers (the TypeScript SDK's examples
    among them) say 400 with a message about the session id instead."""
    if refused.status == 404:
        return True
    problem = jsonrpc.error_of(refused.frame) if refused.frame is not None else None
    return refused.status == 400 and problem is not None and "session" in problem[1].lower()
