"""Change notifications across the eras.

A session-era server announces changes with unsolicited notifications (`list_changed`,
`resources/updated` after `resources/subscribe`); a 2026-07-28 client opts in per stream with
`subscriptions/listen` and receives them tagged with that stream's id. The rules are here,
sans-IO: which filter a stream gets (`honoured_filter`), the one upstream listen a session-era
client needs in front of a modern upstream (`filter_for_legacy`), tagging, the acknowledgement
and the result. Serving the streams is `bridge.listen_hub`'s.
"""

from __future__ import annotations

from typing import Any

import msgspec

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId

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
