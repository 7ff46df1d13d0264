"""Listen streams of 2026-07-28 clients in front of a session-era upstream.

`ListenHub` holds one client's open `subscriptions/listen` streams for one upstream: it
subscribes the upstream to each resource a stream asks for (once, however many streams watch
it), delivers each change notification to the streams that opted in to it, tagged with the
stream's id, and unsubscribes what no stream watches any more when a stream ends. The rules
it applies are protocol.subscriptions'.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId
from frugal_proxy.protocol.subscriptions import FILTER_KEYS, RESOURCE_UPDATED, honoured_filter, tag

log = logging.getLogger("frugal_proxy.subscriptions")

Send = Callable[[Frame], Awaitable[None]]
UriAction = Callable[[str], Awaitable[None]]


@dataclass(eq=False)
class _Listener:
    subscription_id: RequestId
    kinds: set[str]
    uris: set[str] = field(default_factory=set)


class ListenHub:
    """Listen streams of modern clients, fed by a session-era upstream's notifications."""

    def __init__(self, send: Send, subscribe: UriAction, unsubscribe: UriAction) -> None:
        self._send = send
        self._subscribe = subscribe
        self._unsubscribe = unsubscribe
        self._listeners: dict[RequestId, _Listener] = {}

    def _watched(self) -> set[str]:
        return {uri for listener in self._listeners.values() for uri in listener.uris}

    async def listen(
        self,
        subscription_id: RequestId,
        requested: Any,
        capabilities: dict[str, Any],
        *,
        task_status: anyio.abc.TaskStatus[dict[str, Any]] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve one listen stream until the client cancels it; the filter it honours is
        reported through `task_status` once the upstream subscriptions are in place."""
        accepted = honoured_filter(requested, capabilities)
        listener = _Listener(
            subscription_id,
            {key for key, value in accepted.items() if value is True},
            set(accepted.get("resourceSubscriptions", [])),
        )
        for uri in sorted(listener.uris - self._watched()):
            await self._subscribe(uri)
        self._listeners[subscription_id] = listener
        try:
            task_status.started(accepted)
            await anyio.sleep_forever()
        finally:
            self._listeners.pop(subscription_id, None)
            with anyio.CancelScope(shield=True):
                for uri in sorted(listener.uris - self._watched()):
                    try:
                        await self._unsubscribe(uri)
                    except Exception as exc:
                        log.info("resources/unsubscribe failed", extra={"reason": str(exc)[:200]})

    async def publish(self, frame: Frame) -> None:
        """Deliver an upstream change notification to every stream that opted in to it."""
        method = jsonrpc.method_of(frame) or ""
        uri: str | None = None
        if method == RESOURCE_UPDATED:
            value = jsonrpc.params_of(frame).get("uri")
            decoded = jsonrpc.decode_any(value) if value is not None else None
            uri = decoded if isinstance(decoded, str) else None
        key = FILTER_KEYS.get(method)
        for listener in list(self._listeners.values()):
            if (key is not None and key in listener.kinds) or (uri is not None and uri in listener.uris):
                await self._send(tag(frame, listener.subscription_id))
