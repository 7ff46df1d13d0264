"""Reservations wait from `hold` until `done` (no longer than a deadline), and never when nothing
is being rebuilt."""

from __future__ import annotations

import time

import anyio
import pytest

from frugal_proxy.state.seeding import Seeding, StillSeeding
from tests.pace import deadline

pytestmark = pytest.mark.anyio


async def test_wait_blocks_between_hold_and_done_only() -> None:
    seeding = Seeding()
    with deadline(1):
        await seeding.wait()  # nothing held: no wait
    seeding.hold()
    passed: list[int] = []

    async def waiter(n: int) -> None:
        await seeding.wait()
        passed.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(waiter, n)
        await anyio.wait_all_tasks_blocked()
        assert passed == []
        seeding.done()
    assert sorted(passed) == [0, 1, 2]
    seeding.done()  # a second done is harmless
    with deadline(1):
        await seeding.wait()


async def test_a_wait_with_a_deadline_gives_up_then_and_a_done_before_it_lets_it_through() -> None:
    seeding = Seeding()
    seeding.hold()
    started = time.monotonic()
    with deadline(5), pytest.raises(StillSeeding, match="still being read"):
        await seeding.wait(started + 0.05)
    assert time.monotonic() - started >= 0.05

    async def finish() -> None:
        await anyio.sleep(0.02)
        seeding.done()

    async with anyio.create_task_group() as tg:
        tg.start_soon(finish)
        with deadline(5):
            await seeding.wait(time.monotonic() + 30)  # done well before the deadline: no error
    with deadline(1):
        await seeding.wait(time.monotonic() - 1)  # nothing held: a deadline already passed does not matter
