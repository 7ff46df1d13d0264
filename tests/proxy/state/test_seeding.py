"""Reservations wait from `hold` until `done`, and never when nothing is being rebuilt."""

from __future__ import annotations

import anyio
import pytest

from frugal_proxy.state.seeding import Seeding

pytestmark = pytest.mark.anyio


async def test_wait_blocks_between_hold_and_done_only() -> None:
    seeding = Seeding()
    with anyio.fail_after(1):
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
    with anyio.fail_after(1):
        await seeding.wait()
