"""The client's side of a connection: messages to it (a listen stream's to its own stream),
requests to it answered by id, a cancelled request withdrawn, and a client that goes away."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from frugal_proxy.bridge.downstream import ClientGone, DownstreamPeer
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.protocol.subscriptions import tag
from tests.pace import deadline

pytestmark = pytest.mark.anyio


class Writer:
    def __init__(self, broken: bool = False) -> None:
        self.sent: list[Any] = []
        self.broken = broken

    async def send(self, frame: Frame | list[Frame]) -> None:
        if self.broken:
            raise anyio.BrokenResourceError
        self.sent.append(frame)


async def test_a_request_is_answered_by_the_reply_with_its_id() -> None:
    writer = Writer()
    peer = DownstreamPeer(writer)
    with deadline(5):
        async with anyio.create_task_group() as tg:
            answers: list[Frame] = []

            async def ask() -> None:
                answers.append(await peer.request("roots/list", {}))

            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            (asked,) = writer.sent
            assert jsonrpc.method_of(asked) == "roots/list"
            assert not peer.take_reply(jsonrpc.result(999, {}))  # nobody asked that
            assert peer.take_reply(jsonrpc.result(jsonrpc.id_of(asked), {"roots": []}))
    assert jsonrpc.decode_any(answers[0]["result"]) == {"roots": []}


async def test_a_cancelled_request_is_withdrawn_from_the_client() -> None:
    writer = Writer()
    peer = DownstreamPeer(writer)
    with deadline(5), anyio.move_on_after(0.05):
        await peer.request("sampling/createMessage", {})
    asked, withdrawn = writer.sent
    assert jsonrpc.method_of(withdrawn) == "notifications/cancelled"
    assert jsonrpc.decode_any(jsonrpc.params_of(withdrawn)["requestId"]) == jsonrpc.id_of(asked)
    assert not peer.take_reply(jsonrpc.result(jsonrpc.id_of(asked), {}))  # too late: nobody waits


async def test_a_client_that_goes_away_fails_its_requests_and_drops_its_messages() -> None:
    with deadline(5):
        gone = DownstreamPeer(Writer(broken=True))
        with pytest.raises(ClientGone):
            await gone.request("roots/list", {})
        await gone.send(jsonrpc.notification("n", {}))  # dropped, logged, not raised
        writer = Writer()
        closing = DownstreamPeer(writer)
        async with anyio.create_task_group() as tg:
            failures: list[BaseException] = []

            async def ask() -> None:
                try:
                    await closing.request("roots/list", {})
                except ClientGone as exc:
                    failures.append(exc)

            tg.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            closing.close()
    assert len(failures) == 1


async def test_a_listen_streams_notifications_go_to_its_own_stream() -> None:
    writer = Writer()
    peer = DownstreamPeer(writer)
    own: list[Frame] = []

    async def stream(frame: Frame) -> None:
        own.append(frame)

    peer.listeners["s1"] = stream
    changed = jsonrpc.notification("notifications/tools/list_changed", {})
    with deadline(5):
        await peer.send(tag(changed, "s1"))
        await peer.send(tag(changed, "s2"))
        await peer.send(changed)
    assert own == [tag(changed, "s1")]
    assert writer.sent == [tag(changed, "s2"), changed]  # another stream's, and an untagged one
