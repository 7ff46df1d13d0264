"""The in-memory spend book: reservations while within the cap, releases, the UTC day rolling
over by its clock, and seeding from what was spent before a restart."""

from __future__ import annotations

import datetime

import anyio
import pytest

from frugal_proxy.state.spend import MemorySpend, seconds_to_midnight, utc_day
from tests.fake_clock import Clock
from tests.pace import deadline

pytestmark = pytest.mark.anyio

NOON = datetime.datetime(2026, 5, 1, 12, tzinfo=datetime.UTC).timestamp()


def clock_at(when: float) -> Clock:
    clock = Clock()
    clock.now = when
    return clock


async def test_reservations_go_ahead_while_within_the_cap_and_come_back_on_release() -> None:
    book = MemorySpend(clock_at(NOON))
    assert await book.reserve("search/a", 3, 5) == "2026-05-01"
    assert await book.reserve("search/a", 3, 5) is None  # 3 + 3 would pass 5
    assert await book.reserve("search/a", 2, 5) == "2026-05-01"  # lands exactly on the cap
    assert await book.reserve("search/a", 1, 5) is None
    await book.release("search/a", 3, "2026-05-01")
    assert book.spent("search/a") == 2 and book.spent("search/b") == 0


async def test_the_day_rolls_over_at_utc_midnight_and_old_releases_are_ignored() -> None:
    clock = clock_at(NOON)
    book = MemorySpend(clock)
    book.seed({"search/a": 7}, "2026-05-01")
    assert book.spent("search/a") == 7
    assert seconds_to_midnight(clock.now) == 12 * 3600
    clock.now += 12 * 3600
    assert utc_day(clock.now) == "2026-05-02" and book.spent("search/a") == 0
    await book.release("search/a", 7, "2026-05-01")
    assert book.spent("search/a") == 0


async def test_reservations_wait_while_the_ledger_is_read_then_see_what_it_held() -> None:
    """From `hold` to `seed` a reservation waits, so no call goes ahead on a counter that does not
    yet hold what was spent before the restart; then it sees it, and the cap holds."""
    book = MemorySpend(clock_at(NOON))
    book.seeding.hold()
    results: list[str | None] = []

    async def reserve() -> None:
        results.append(await book.reserve("search/a", 3, 8))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reserve)
        tg.start_soon(reserve)
        await anyio.wait_all_tasks_blocked()
        assert results == []  # both wait for the rebuild
        book.seed({"search/a": 4}, "2026-05-01")
    assert results.count("2026-05-01") == 1 and results.count(None) == 1
    assert book.spent("search/a") == 7  # 4 before the restart + one reservation of 3; the other would pass 8


async def test_a_seed_for_a_day_that_is_over_is_dropped_and_still_lets_reservations_go() -> None:
    book = MemorySpend(clock_at(NOON))
    book.seeding.hold()
    book.seed({"search/a": 4}, "2026-04-30")  # read just before midnight, applied after it
    assert book.spent("search/a") == 0
    with deadline(1):
        assert await book.reserve("search/a", 3, 5) == "2026-05-01"
