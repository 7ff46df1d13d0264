"""ListenHub in-process: one upstream subscription per watched URI, notifications delivered only
to the streams that asked for them, tagged with each stream's id, and unsubscribed when the last
stream watching a URI ends."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from frugal_proxy.bridge.listen_hub import ListenHub
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from tests.pace import deadline

pytestmark = pytest.mark.anyio

CAPABILITIES = {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True}}


class Upstream:
    def __init__(self) -> None:
        self.sent: list[Frame] = []
        self.calls: list[tuple[str, str]] = []

    async def send(self, frame: Frame) -> None:
        self.sent.append(frame)

    async def subscribe(self, uri: str) -> None:
        self.calls.append(("subscribe", uri))

    async def unsubscribe(self, uri: str) -> None:
        self.calls.append(("unsubscribe", uri))


def subscription_of(frame: Frame) -> Any:
    meta = jsonrpc.sub_object(jsonrpc.params_of(frame), "_meta")
    return jsonrpc.decode_any(meta[eras.META_SUBSCRIPTION_ID])


async def test_streams_get_what_they_asked_for_and_uris_are_shared() -> None:
    up = Upstream()
    hub = ListenHub(up.send, up.subscribe, up.unsubscribe)
    with deadline(5):
        async with anyio.create_task_group() as tg:
            first = await tg.start(
                hub.listen, "a", {"toolsListChanged": True, "resourceSubscriptions": ["r://1"]}, CAPABILITIES
            )
            second = await tg.start(hub.listen, "b", {"resourceSubscriptions": ["r://1", "r://2"]}, CAPABILITIES)
            assert first == {"toolsListChanged": True, "resourceSubscriptions": ["r://1"]}
            assert second == {"resourceSubscriptions": ["r://1", "r://2"]}
            assert up.calls == [("subscribe", "r://1"), ("subscribe", "r://2")]  # r://1 once for both

            await hub.publish(jsonrpc.notification("notifications/tools/list_changed", {}))
            await hub.publish(jsonrpc.notification("notifications/resources/updated", {"uri": jsonrpc.raw("r://2")}))
            await hub.publish(jsonrpc.notification("notifications/prompts/list_changed", {}))
            # The tools change goes to "a" only, the r://2 update to "b" only, the prompts change to nobody.
            assert [(jsonrpc.method_of(frame), subscription_of(frame)) for frame in up.sent] == [
                ("notifications/tools/list_changed", "a"),
                ("notifications/resources/updated", "b"),
            ]
            tg.cancel_scope.cancel()
    # Both streams ended: each URI is unsubscribed once, after the last stream watching it.
    assert sorted(up.calls[2:]) == [("unsubscribe", "r://1"), ("unsubscribe", "r://2")]


async def test_a_filter_the_upstream_cannot_honour_is_narrowed() -> None:
    up = Upstream()
    hub = ListenHub(up.send, up.subscribe, up.unsubscribe)
    with deadline(5):
        async with anyio.create_task_group() as tg:
            accepted = await tg.start(
                hub.listen, "a", {"promptsListChanged": True, "resourceSubscriptions": ["r://1"]}, {"tools": {}}
            )
            assert accepted == {}
            await hub.publish(jsonrpc.notification("notifications/prompts/list_changed", {}))
            tg.cancel_scope.cancel()
    assert up.sent == [] and up.calls == []
