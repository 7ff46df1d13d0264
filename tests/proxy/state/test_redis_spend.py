"""The spend and free-quota contracts, run against the memory store and the Redis one alike, and
what only a shared store has: several replicas against one cap, the rebuild rule, a flush."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest

from frugal_proxy.state.redis_link import Unreachable
from frugal_proxy.state.redis_spend import RedisSpend, RedisUsage
from frugal_proxy.state.spend import MemorySpend, period_of, utc_day
from frugal_proxy.state.usage import MemoryUsage, utc_month
from tests.pace import deadline
from tests.redis_server import RedisServer, backend, redis_server, replica, server, until

__all__ = ["backend", "redis_server", "server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

NOW = 1_780_000_000.0
DAY, MONTH = utc_day(NOW), utc_month(NOW)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def shared(
    kind: str, backend: str, server: RedisServer | None, count: int, clock: Callable[[], float]
) -> AsyncIterator[list[Any]]:
    """`count` stores (`spend` books or `usage` counters) that keep one set of books: one memory
    store (one process), or one Redis store on each of `count` replicas' connections."""
    memory, redis, period = (MemorySpend, RedisSpend, DAY) if kind == "spend" else (MemoryUsage, RedisUsage, MONTH)
    if server is None:
        yield [memory(clock)] * count
        return
    async with AsyncExitStack() as stack:
        links = [await stack.enter_async_context(replica(server.url)) for _ in range(count)]
        stores = [redis(link, clock) for link in links]
        for store in stores:
            await store.seed_period({}, period)
        yield stores


async def agreed(store: Any, predicate: Callable[[], bool]) -> None:
    """A memory store holds it at once; a replica's Redis store once the pub/sub event is in."""
    if isinstance(store, RedisSpend | RedisUsage):
        await until(store.link, predicate)
    assert predicate()


# -- the contract, both stores ---------------------------------------------------------------------


async def test_a_reservation_within_the_cap_goes_ahead_and_one_past_it_does_not(
    backend: str, server: RedisServer | None
) -> None:
    async with shared("spend", backend, server, 1, Clock()) as (book,):
        assert period_of(await book.reserve("search/a", 6, 10)) == DAY
        second = await book.reserve("search/a", 4, 10)  # exactly on the cap: goes ahead
        assert second is not None and period_of(second) == DAY
        assert await book.reserve("search/a", 1, 10) is None
        assert book.spent("search/a") == 10
        await book.release("search/a", 4, second)
        assert book.spent("search/a") == 6
        await book.release("search/a", 4, "2026-01-01")  # a day that is over: nothing
        assert book.spent("search/a") == 6
        assert book.spent("search/b") == 0


async def test_concurrent_reservations_from_several_replicas_never_pass_the_cap(
    backend: str, server: RedisServer | None
) -> None:
    """100 calls at $0.0030 against a $0.0100 cap, spread over three replicas' books: exactly
    three go ahead, and the books agree on $0.0090."""
    async with shared("spend", backend, server, 3, Clock()) as books:
        granted: list[str | None] = []

        async def one(number: int) -> None:
            granted.append(await books[number % 3].reserve("search/serper", 3000, 10_000))

        with deadline(30):
            async with anyio.create_task_group() as tg:
                for number in range(100):
                    tg.start_soon(one, number)
        assert sum(day is not None for day in granted) == 3
        for book in books:
            await agreed(book, lambda book=book: book.spent("search/serper") == 9000)  # type: ignore[misc]


async def test_free_quota_units_are_exact_over_several_replicas(backend: str, server: RedisServer | None) -> None:
    """20 concurrent calls over three replicas against a quota of 5: exactly 5 units."""
    async with shared("usage", backend, server, 3, Clock()) as counters:
        months: list[str | None] = []

        async def one(number: int) -> None:
            months.append(await counters[number % 3].reserve("serper", 5))

        with deadline(30):
            async with anyio.create_task_group() as tg:
                for number in range(20):
                    tg.start_soon(one, number)
        assert [period_of(month) for month in months if month].count(MONTH) == 5 and months.count(None) == 15
        await counters[1].release("serper", next(month for month in months if month))
        for counter in counters:
            await agreed(counter, lambda counter=counter: counter.calls_this_month("serper") == 4)  # type: ignore[misc]
        assert period_of(await counters[2].reserve("serper", 5)) == MONTH


async def test_the_day_rolls_over_at_utc_midnight(backend: str, server: RedisServer | None) -> None:
    clock = Clock()
    async with shared("spend", backend, server, 1, clock) as (book,):
        yesterday = await book.reserve("search/a", 10, 10)
        assert yesterday is not None and period_of(yesterday) == DAY
        clock.now += 86_400
        if backend == "redis":
            await book.seed_period({}, utc_day(clock.now))
        assert book.spent("search/a") == 0
        assert period_of(await book.reserve("search/a", 10, 10)) == utc_day(clock.now)
        await book.release("search/a", 10, yesterday)  # yesterday's: a no-op
        assert book.spent("search/a") == 10


# -- Redis only ---------------------------------------------------------------------------------


async def test_only_a_reservation_that_leaves_no_room_for_another_is_published(redis_server: RedisServer) -> None:
    """The other replicas' routing reads need to know when a provider's next call stops fitting
    (and every release), not every total: a message per call would cost every replica CPU."""
    async with shared("spend", "redis", redis_server, 2, Clock()) as (one, two):
        published = redis_server.calls("publish")
        assert await one.reserve("search/a", 3000, 10_000) and await one.reserve("search/a", 3000, 10_000)
        assert redis_server.calls("publish") == published and two.spent("search/a") == 0  # room left: quiet
        third = await one.reserve("search/a", 3000, 10_000)
        assert third is not None and redis_server.calls("publish") == published + 1
        await until(two.link, lambda: two.spent("search/a") == 9000)  # no fourth fits: said
        await one.release("search/a", 3000, third)
        await until(two.link, lambda: two.spent("search/a") == 6000)  # room again: said


async def test_the_keys_carry_the_prefix_the_kind_and_the_day_and_expire(redis_server: RedisServer) -> None:
    async with replica(redis_server.url, prefix="t1:") as link:
        book, usage = RedisSpend(link, Clock()), RedisUsage(link, Clock())
        await book.seed_period({}, DAY)
        await usage.seed_period({}, MONTH)
        await book.reserve("search/a", 5, 10)
        await usage.reserve("serper", 5)
    keys = sorted(redis_server.command("KEYS", "*").split())
    assert keys == [f"t1:spend:{DAY}", f"t1:usage:{MONTH}"]
    for key in keys:
        assert int(redis_server.command("TTL", key)) > 0


async def test_redis_holding_the_day_wins_over_the_ledger(redis_server: RedisServer) -> None:
    """The first replica seeds the day from its ledger; one that starts later does not add its
    ledger again: Redis already holds the day."""
    async with replica(redis_server.url) as first, replica(redis_server.url) as second:
        one, two = RedisSpend(first, Clock()), RedisSpend(second, Clock())
        await one.seed_period({"search/a": 7}, DAY)
        await two.seed_period({"search/a": 7}, DAY)
        assert period_of(await two.reserve("search/a", 3, 10)) == DAY
        assert await one.reserve("search/a", 1, 10) is None
        assert redis_server.command("HGET", f"frugal:spend:{DAY}", "search/a") == "10"


async def test_after_a_flush_the_next_reservation_rebuilds_from_the_ledger(redis_server: RedisServer) -> None:
    asked: list[str] = []

    async def ledger(period: str) -> Mapping[str, int]:
        asked.append(period)
        return {"search/a": 8}

    async with replica(redis_server.url) as link:
        book = RedisSpend(link, Clock(), rebuild=ledger)
        await book.seed_period({"search/a": 2}, DAY)
        assert period_of(await book.reserve("search/a", 2, 10)) == DAY
        redis_server.command("FLUSHALL")
        assert await book.reserve("search/a", 3, 10) is None  # the ledger's 8 are back: 8 + 3 > 10
        assert period_of(await book.reserve("search/a", 2, 10)) == DAY
        assert asked == [DAY]
        assert book.spent("search/a") == 10


async def test_a_reservation_from_before_a_flush_takes_nothing_back_from_the_rebuilt_day(
    redis_server: RedisServer,
) -> None:
    """A call in flight at a flush that then does not bill: the rebuilt hash never held its
    price, so its release must not lower what the new day holds (that would let calls past the
    cap later)."""

    async def ledger(period: str) -> Mapping[str, int]:
        return {"search/a": 4}

    async with replica(redis_server.url) as link:
        book = RedisSpend(link, Clock(), rebuild=ledger)
        await book.seed_period({}, DAY)
        in_flight = await book.reserve("search/a", 3, 10)
        assert in_flight is not None
        redis_server.command("FLUSHALL")
        assert period_of(await book.reserve("search/a", 6, 10)) == DAY  # rebuilt: 4 + 6
        await book.release("search/a", 3, in_flight)  # from the hash the flush removed
        assert redis_server.command("HGET", f"frugal:spend:{DAY}", "search/a") == "10"
        assert await book.reserve("search/a", 1, 10) is None


async def test_a_reservation_raises_unreachable_when_redis_is_stopped_and_works_after(
    redis_server: RedisServer,
) -> None:
    async with replica(redis_server.url) as link:
        book = RedisSpend(link, Clock())
        await book.seed_period({}, DAY)
        with redis_server.stopped():
            with deadline(15):  # bounded by the command timeout, never a hang
                with pytest.raises(Unreachable, match="state: redis unreachable"):
                    await book.reserve("search/a", 1, 10)
            assert link.state == "degraded"
        await until(link, lambda: link.state == "ok")
        assert period_of(await book.reserve("search/a", 1, 10)) == DAY
