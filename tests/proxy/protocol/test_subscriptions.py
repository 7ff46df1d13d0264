"""Change notifications across the eras, sans-IO: which filter a server can honour, what a
session-era client is owed, tagging a notification with its stream, and merging filters."""

from __future__ import annotations

from typing import Any

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.subscriptions import (
    acknowledgement,
    filter_for_legacy,
    honoured_filter,
    listen_result,
    merge_filters,
    tag,
)

EVERYTHING = {"tools": {"listChanged": True}, "prompts": {"listChanged": True}, "resources": {"subscribe": True}}


def meta_of(frame: Any) -> dict[str, Any]:
    return jsonrpc.decode_any(jsonrpc.params_of(frame).get("_meta", b"{}"))  # type: ignore[no-any-return]


def test_a_filter_is_narrowed_to_what_the_server_announces() -> None:
    requested = {"toolsListChanged": True, "resourcesListChanged": True, "resourceSubscriptions": ["a://1", 7]}
    assert honoured_filter(requested, EVERYTHING) == {"toolsListChanged": True, "resourceSubscriptions": ["a://1"]}
    assert honoured_filter(requested, {"tools": {}}) == {}
    assert honoured_filter("nonsense", EVERYTHING) == {}


def test_a_session_era_client_hears_every_kind_the_server_offers() -> None:
    assert filter_for_legacy(EVERYTHING, set()) == {"toolsListChanged": True, "promptsListChanged": True}
    assert filter_for_legacy(EVERYTHING, {"b://2", "a://1"})["resourceSubscriptions"] == ["a://1", "b://2"]
    assert filter_for_legacy({}, {"a://1"}) == {}


def test_tagging_sets_and_removes_the_subscription_id_and_keeps_the_rest() -> None:
    note = jsonrpc.notification("notifications/tools/list_changed", {"_meta": {"keep": 1}, "x": 2})
    tagged = tag(note, "s1")
    assert meta_of(tagged) == {"keep": 1, eras.META_SUBSCRIPTION_ID: "s1"}
    assert jsonrpc.decode_any(jsonrpc.params_of(tagged)["x"]) == 2
    assert meta_of(tag(tagged, None)) == {"keep": 1}
    bare = tag(tag(jsonrpc.notification("n", {}), 5), None)
    assert "_meta" not in jsonrpc.params_of(bare)
    untagged = jsonrpc.notification("n", {})
    assert tag(untagged, None) is untagged


def test_the_acknowledgement_and_the_result_name_the_stream() -> None:
    ack = acknowledgement(3, {"toolsListChanged": True})
    assert jsonrpc.method_of(ack) == "notifications/subscriptions/acknowledged"
    assert jsonrpc.decode_any(jsonrpc.params_of(ack)["notifications"]) == {"toolsListChanged": True}
    assert meta_of(ack) == {eras.META_SUBSCRIPTION_ID: 3}
    result = {key: jsonrpc.decode_any(value) for key, value in listen_result(3).items()}
    assert result == {"resultType": "complete", "_meta": {eras.META_SUBSCRIPTION_ID: 3}}


def test_filters_merge_into_their_union() -> None:
    merged = merge_filters(
        [
            {"toolsListChanged": True, "resourceSubscriptions": ["a://1"]},
            {"promptsListChanged": False, "resourceSubscriptions": ["a://1", "b://2"]},
            {},
        ]
    )
    assert merged == {"toolsListChanged": True, "resourceSubscriptions": ["a://1", "b://2"]}
    assert merge_filters([]) == {}
