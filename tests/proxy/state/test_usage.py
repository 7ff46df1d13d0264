"""Monthly call counts for free quotas roll over at the start of a UTC month."""

from __future__ import annotations

import datetime

import anyio
import pytest

from frugal_proxy.state.usage import MemoryUsage, utc_month

pytestmark = pytest.mark.anyio


def test_counts_roll_over_at_the_utc_month() -> None:
    now = [datetime.datetime(2026, 7, 31, 23, 59, 59, tzinfo=datetime.UTC).timestamp()]
    usage = MemoryUsage(lambda: now[0])
    usage.seed({"serper": 2}, "2026-07")
    assert usage.calls_this_month("serper") == 2 and usage.calls_this_month("brave") == 0
    now[0] += 1
    assert utc_month(now[0]) == "2026-08"
    assert usage.calls_this_month("serper") == 0


async def test_reservations_wait_for_the_seed_and_a_stale_month_is_dropped() -> None:
    now = datetime.datetime(2026, 8, 1, 0, 0, 1, tzinfo=datetime.UTC).timestamp()
    usage = MemoryUsage(lambda: now)
    usage.seeding.hold()
    taken: list[str | None] = []

    async def reserve() -> None:
        taken.append(await usage.reserve("serper", 1))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reserve)
        await anyio.wait_all_tasks_blocked()
        assert taken == []
        usage.seed({"serper": 5}, "2026-07")  # July's count, read as August began: not August's
    assert taken == ["2026-08"] and usage.calls_this_month("serper") == 1
