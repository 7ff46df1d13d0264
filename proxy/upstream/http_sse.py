"""HTTP+SSE (2024-11-05): one GET event stream, whose first event (`endpoint`) says where to POST
messages; everything the server says, replies included, arrives as `message` events on it.

The connection (http.py) falls back to it when the URL refuses a POST (404/405) without a
JSON-RPC body and a GET opens such a stream.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import anyio
import anyio.abc
import httpx2

from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream import http_wire as wire
from frugal_proxy.upstream.base import Pending
from frugal_proxy.upstream.http_modern import STREAMING_METHODS, PostExchange


class SseMode(PostExchange):
    """The HTTP+SSE part of the HTTP connection (http.py)."""

    _post_url: str | None  # where messages go, from the endpoint event; set up by __init__

    @abc.abstractmethod
    async def _post_message(
        self, frame: Frame, on_sent: Callable[[], None] | None = None, on_refused: Callable[[], None] | None = None
    ) -> None:
        """POST a message; `on_sent` is called once its body has been written, `on_refused` when
        the server answers it with a failure status."""

    @abc.abstractmethod
    async def _send_cancel(self, upstream_id: int) -> None:
        """Tell the server a request is cancelled."""

    @abc.abstractmethod
    def _lost(self, reason: str, *, retry_after: float | None = None) -> UpstreamDown:
        """Mark the connection down and fail what waits."""

    async def _request_over_sse(self, upstream_id: int, method: str, params: Any, pending: Pending) -> Frame:
        self._pending[upstream_id] = pending
        try:
            await self._post_message(
                jsonrpc.request(upstream_id, method, params), on_sent=pending.mark_sent, on_refused=pending.mark_refused
            )
            with anyio.fail_after(None if method in STREAMING_METHODS else self.read_timeout):
                await pending.wait()
        except TimeoutError:
            self._pending.pop(upstream_id, None)
            self._abandoned.add(upstream_id)
            raise UpstreamError(
                f"upstream {self.name!r} did not answer {method} within {self.read_timeout:g} s ({self.safe_url})"
            ) from None
        except anyio.get_cancelled_exc_class():
            # A request whose POST never went out is unknown to the server: nothing to cancel.
            if self._pending.pop(upstream_id, None) is not None and pending.sent:
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
