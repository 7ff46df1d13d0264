"""Coalescer: the writes offered in one loop turn after the first go out together when it ends
(and the first too, once a reader says more follow)."""

from __future__ import annotations

import anyio
import pytest

from frugal_proxy.transports.coalesce import Coalescer
from tests.pace import deadline

pytestmark = pytest.mark.anyio


class Pipe:
    """What a writer's `send` saw; `whole` says whether each send went whole."""

    def __init__(self, whole: bool = True) -> None:
        self.sent: list[bytes] = []
        self.whole = whole

    def send(self, data: bytes) -> bool:
        self.sent.append(data)
        return self.whole


async def test_what_is_held_in_one_turn_goes_out_joined_and_in_order_when_it_ends() -> None:
    pipe = Pipe()
    coalescer = Coalescer(pipe.send)
    assert not coalescer.corked
    coalescer.cork()  # the first message of the turn went out at once
    for data in (b"a\n", b"b\n", b"c\n"):
        assert coalescer.corked
        coalescer.hold(data)
    assert pipe.sent == [] and coalescer.held_bytes == 6
    with deadline(5):
        await anyio.lowlevel.checkpoint()
    assert pipe.sent == [b"a\nb\nc\n"] and coalescer.held_bytes == 0
    assert coalescer.corked  # it went whole: what the next turn finishes is held too
    coalescer.hold(b"d\n")
    with deadline(5):
        await anyio.lowlevel.checkpoint()
    assert pipe.sent == [b"a\nb\nc\n", b"d\n"]
    with deadline(5):
        await anyio.lowlevel.checkpoint()
    assert not coalescer.corked  # a turn that held nothing ends the coalescing


async def test_a_send_that_did_not_go_whole_is_not_followed_by_another_cork() -> None:
    pipe = Pipe(whole=False)
    coalescer = Coalescer(pipe.send)
    coalescer.cork()
    coalescer.hold(b"a\n")
    with deadline(5):
        await anyio.lowlevel.checkpoint()
    assert pipe.sent == [b"a\n"] and not coalescer.corked


async def test_uncork_sends_what_is_held_at_once_for_a_write_that_must_follow_it() -> None:
    pipe = Pipe()
    coalescer = Coalescer(pipe.send)
    coalescer.uncork()
    assert pipe.sent == []  # nothing held: nothing sent
    coalescer.cork()
    coalescer.hold(b"a\n")
    coalescer.uncork()
    assert pipe.sent == [b"a\n"]
    with deadline(5):
        await anyio.lowlevel.checkpoint()
        await anyio.lowlevel.checkpoint()
    assert pipe.sent == [b"a\n"]  # the turn's end finds nothing more


async def test_a_turn_held_before_its_first_message_sends_them_all_in_one_when_it_ends() -> None:
    pipe = Pipe()
    coalescer = Coalescer(pipe.send)
    coalescer.hold_turn()  # a reader read several messages: the first is held too
    assert coalescer.corked
    coalescer.hold_turn()  # again in the same turn: nothing more to do
    for data in (b"a\n", b"b\n"):
        coalescer.hold(data)
    assert pipe.sent == []
    with deadline(5):
        await anyio.lowlevel.checkpoint()
    assert pipe.sent == [b"a\nb\n"]
