"""Change notifications across the eras.

A session-era server announces changes with unsolicited notifications (`list_changed`,
`resources/updated` after `resources/subscribe`); a 2026-07-28 client opts in per stream with
`subscriptions/listen` and receives them tagged with that stream's id. `ListenHub` serves
listen streams to modern clients in front of a session-era upstream; `filter_for_legacy`
builds the one upstream listen a session-era client needs in front of a modern upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId

log = logging.getLogger("frugal_proxy.subscriptions")

FILTER_KEYS = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
_CAPABILITY_OF = {
    "toolsListChanged": "tools",
    "promptsListChanged": "prompts",
    "resourcesListChanged": "resources",
}
RESOURCE_UPDATED = "notifications/resources/updated"

Send = Callable[[Frame], Awaitable[None]]
UriAction = Callable[[str], Awaitable[None]]


def honoured_filter(requested: Any, capabilities: dict[str, Any]) -> dict[str, Any]:
    """The part of a requested filter that a server with these capabilities can honour."""
    requested = requested if isinstance(requested, dict) else {}
    accepted: dict[str, Any] = {}
    for key, capability in _CAPABILITY_OF.items():
        section = capabilities.get(capability)
        if requested.get(key) and isinstance(section, dict) and section.get("listChanged"):
            accepted[key] = True
    resources = capabilities.get("resources")
    uris = requested.get("resourceSubscriptions")
    if uris and isinstance(resources, dict) and resources.get("subscribe"):
        accepted["resourceSubscriptions"] = [uri for uri in uris if isinstance(uri, str)]
    return accepted


def filter_for_legacy(capabilities: dict[str, Any], uris: set[str]) -> dict[str, Any]:
    """What a session-era client is entitled to hear: every change kind the server offers."""
    wanted: dict[str, Any] = {key: True for key in _CAPABILITY_OF}
    if uris:
        wanted["resourceSubscriptions"] = sorted(uris)
    return honoured_filter(wanted, capabilities)


def tag(frame: Frame, subscription_id: RequestId | None) -> Frame:
    """The notification with its `_meta` subscription id set (or removed, for None)."""
    params = jsonrpc.params_of(frame)
    meta = jsonrpc.sub_object(params, "_meta")
    if subscription_id is None:
        if eras.META_SUBSCRIPTION_ID not in meta:
            return frame
        meta.pop(eras.META_SUBSCRIPTION_ID)
    else:
        meta[eras.META_SUBSCRIPTION_ID] = jsonrpc.raw(subscription_id)
    if meta:
        params["_meta"] = jsonrpc.raw(meta)
    else:
        params.pop("_meta", None)
    return jsonrpc.with_params(frame, params)


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


def listen_result(subscription_id: RequestId) -> dict[str, msgspec.Raw]:
    return {
        "resultType": jsonrpc.raw("complete"),
        "_meta": jsonrpc.raw({eras.META_SUBSCRIPTION_ID: subscription_id}),
    }


def acknowledgement(subscription_id: RequestId, accepted: dict[str, Any]) -> Frame:
    params = {"notifications": accepted, "_meta": {eras.META_SUBSCRIPTION_ID: subscription_id}}
    return jsonrpc.notification("notifications/subscriptions/acknowledged", params)


def merge_filters(filters: list[dict[str, Any]]) -> dict[str, Any]:
    """The union of what several upstreams honour, as one acknowledged filter."""
    merged: dict[str, Any] = {}
    uris: list[str] = []
    for accepted in filters:
        for key, value in accepted.items():
            if key == "resourceSubscriptions":
                uris.extend(uri for uri in value if uri not in uris)
            elif value:
                merged[key] = True
    if uris:
        merged["resourceSubscriptions"] = uris
    return merged
