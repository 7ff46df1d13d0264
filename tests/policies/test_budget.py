"""Daily spend caps: a provider that reached its cap is skipped and a pinned one refused, the
counters reset at UTC midnight (a fake clock), a cap reached mid-chain by another call is a skip
at dispatch, an unbilled call gives its reservation back, a call that would pass the cap is
skipped while one that lands on it goes ahead, and 100 concurrent calls never pass a cap."""

from __future__ import annotations

import datetime
import time

import anyio
import pytest

from frugal_proxy.capabilities import SearchHit
from frugal_proxy.pipeline.dispatch import DispatchSettings
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.budget import Budget
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Decision, Exchange, Outcome
from frugal_proxy.state.redis_spend import RedisSpend
from frugal_proxy.state.spend import MemorySpend, spend_key, utc_day
from tests.fake_clock import Clock
from tests.pace import deadline
from tests.redis_server import RedisServer, redis_server, replica
from tests.routed_calls import error_text
from tests.routed_calls import search as routed

pytestmark = pytest.mark.anyio
__all__ = ["redis_server"]

YOUCOM = spend_key("search", "youcom")
# 2026-05-01 18:48:00 UTC: 5h12m before the counters reset
EVENING = datetime.datetime(2026, 5, 1, 18, 48, tzinfo=datetime.UTC).timestamp()


def clock_at(when: float) -> Clock:
    clock = Clock()
    clock.now = when
    return clock


def budget(clock: Clock, **caps: int) -> Budget:
    return Budget({spend_key("search", name): cap for name, cap in caps.items()}, MemorySpend(clock), clock)


def found(name: str) -> list[SearchHit]:
    return [SearchHit(name, f"https://{name}.example/", "s", name)]


def provider(name: str, price: int, kind: str = "ok") -> FakeProvider:
    async def answer(ex: Exchange) -> Outcome:
        await anyio.lowlevel.checkpoint()  # let concurrent calls interleave here
        return Outcome("ok", data=found(name)) if kind == "ok" else Outcome("transient", message=f"{name} failed (503)")

    return FakeProvider(name, answer, price, capability="search")


async def test_a_provider_that_reached_its_cap_is_skipped_and_a_pinned_one_refused() -> None:
    clock = clock_at(EVENING)
    policy = budget(clock, youcom=10_000)
    youcom, wiki = provider("youcom", 5_000), provider("wiki", 0)
    pipeline = build_pipeline({"youcom": youcom, "wiki": wiki}, [policy])
    with deadline(5):
        for _ in range(2):
            await pipeline.run(routed("youcom", "wiki"))
        assert policy.book.spent(YOUCOM) == 10_000
        third = routed("youcom", "wiki")
        await pipeline.run(third)
        pinned = await pipeline.run(routed("youcom", provider="youcom"))
    assert len(youcom.calls) == 2 and [a.provider for a in third.attempts] == ["wiki"]
    assert third.trace[0] == Decision(
        "route",
        "budget",
        "skipped",
        "skipped youcom (it has spent $0.0100 of its $0.0100 daily budget; resets at 00:00 UTC, in 5h12m0s)",
        provider="youcom",
    )
    assert error_text(pinned) == (
        "frugal__search: budget: youcom has spent $0.0100 of its $0.0100 daily budget "
        "(resets at 00:00 UTC, in 5h12m0s): leave provider out to use another provider"
    )


async def test_the_counters_reset_at_utc_midnight() -> None:
    clock = clock_at(datetime.datetime(2026, 5, 1, 23, 59, 59, tzinfo=datetime.UTC).timestamp())
    policy = budget(clock, youcom=5_000)
    youcom = provider("youcom", 5_000)
    pipeline = build_pipeline({"youcom": youcom}, [policy])
    with deadline(5):
        await pipeline.run(routed("youcom"))
        late = routed("youcom")
        await pipeline.run(late)
        assert late.attempts == [] and "in 1s)" in late.trace[0].detail
        clock.now += 1  # 00:00:00 UTC
        assert policy.book.spent(YOUCOM) == 0
        await pipeline.run(routed("youcom"))
    assert len(youcom.calls) == 2


async def test_a_cap_reached_mid_chain_by_another_call_is_skipped_at_dispatch() -> None:
    clock = clock_at(EVENING)
    policy = budget(clock, youcom=5_000)

    async def fails_while_another_call_spends(ex: Exchange) -> Outcome:
        assert await policy.book.reserve(YOUCOM, 5_000, 5_000) is not None  # another call got there first
        return Outcome("transient", message="marginalia failed (503)")

    youcom, wiki = provider("youcom", 5_000), provider("wiki", 0)
    marginalia = FakeProvider("marginalia", fails_while_another_call_spends, capability="search")
    ex = routed("marginalia", "youcom", "wiki")
    with deadline(5):
        await build_pipeline({"marginalia": marginalia, "youcom": youcom, "wiki": wiki}, [policy]).run(ex)
    assert youcom.calls == [] and [a.provider for a in ex.attempts] == ["marginalia", "wiki"]
    assert (
        Decision(
            "dispatch",
            "budget",
            "skipped",
            "skipped youcom (other calls reached its $0.0050 daily budget meanwhile; resets at 00:00 UTC, in 5h12m0s)",
            provider="youcom",
        )
        in ex.trace
    )


async def test_a_call_that_did_not_bill_gives_its_reservation_back() -> None:
    clock = clock_at(EVENING)
    policy = budget(clock, youcom=5_000)
    pipeline = build_pipeline({"youcom": provider("youcom", 5_000, kind="error")}, [policy])
    with deadline(5):
        await pipeline.run(routed("youcom"))
    assert policy.book.spent(YOUCOM) == 0


async def test_a_call_that_would_pass_the_cap_is_skipped_and_one_that_lands_on_it_goes_ahead() -> None:
    """$0.0100 a day at $0.0030 a call: three calls ($0.0090), the fourth would spend $0.0120 and
    is skipped (a pinned one refused), saying what a call costs; at $0.0050 a call both land
    exactly on the cap."""
    clock = clock_at(EVENING)
    policy = budget(clock, youcom=10_000, brave=10_000)
    youcom, brave, wiki = provider("youcom", 3_000), provider("brave", 5_000), provider("wiki", 0)
    pipeline = build_pipeline({"youcom": youcom, "brave": brave, "wiki": wiki}, [policy])
    with deadline(5):
        for _ in range(4):
            await pipeline.run(routed("youcom", "wiki"))
            await pipeline.run(routed("brave", "wiki"))
        pinned = await pipeline.run(routed("youcom", provider="youcom"))
    assert len(youcom.calls) == 3 and policy.book.spent(YOUCOM) == 9_000
    assert len(brave.calls) == 2 and policy.book.spent(spend_key("search", "brave")) == 10_000
    assert error_text(pinned) == (
        "frugal__search: budget: youcom has spent $0.0090 of its $0.0100 daily budget, and a call costs $0.0030 "
        "(resets at 00:00 UTC, in 5h12m0s): leave provider out to use another provider"
    )


async def hammer(
    policy: Budget, youcom: FakeProvider, settings: DispatchSettings | None = None
) -> tuple[list[Exchange], int, int]:
    """100 concurrent searches over youcom, then a free provider: the exchanges, what their
    receipts billed together and what the budget's book says youcom spent."""
    pipeline = build_pipeline({"youcom": youcom, "wiki": provider("wiki", 0)}, [policy], settings)
    exchanges = [routed("youcom", "wiki") for _ in range(100)]
    with deadline(10):
        async with anyio.create_task_group() as tg:
            for ex in exchanges:
                tg.start_soon(pipeline.run, ex)
    billed = sum(ex.receipt.total_micros for ex in exchanges if ex.receipt is not None)
    return exchanges, billed, policy.book.spent(YOUCOM)


async def test_a_hundred_concurrent_calls_never_pass_a_cap() -> None:
    """$0.0100 a day at $0.0030 a call: 3 calls go ahead ($0.0090), never more, and what the
    book says was spent is what the receipts billed. Every other call fails over to a free
    provider. With calls that fail (and give their reservation back) mixed in, the same holds."""
    for failing in (False, True):
        clock = clock_at(EVENING)
        policy = budget(clock, youcom=10_000)
        calls = 0

        async def answer(ex: Exchange, failing: bool = failing) -> Outcome:
            nonlocal calls
            calls += 1
            number = calls
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            if failing and number % 2:
                return Outcome("transient", message="youcom failed (503)")
            return Outcome("ok", data=found("youcom"))

        youcom = FakeProvider("youcom", answer, 3_000, capability="search")
        exchanges, billed, spent = await hammer(policy, youcom)
        assert spent == billed
        assert spent <= 10_000
        assert all(ex.receipt is not None and ex.receipt.provider_used for ex in exchanges)
        if not failing:
            assert (calls, spent) == (3, 9_000)
        else:
            assert calls == 3 and spent == 3_000  # one of the three billed; the other two gave theirs back


async def test_a_hundred_concurrent_calls_with_cut_ones_never_pass_a_cap_and_count_exactly() -> None:
    """The same hammer with calls cut by the deadline mixed in: one in three hangs after its
    request went out (it keeps its reservation: it may have been billed), one in three hangs while
    still connecting (it gives its reservation back), the rest answer. The cap holds, and the book
    counts exactly what the receipts say was billed or may have been."""
    clock = clock_at(EVENING)
    policy = budget(clock, youcom=10_000)
    calls = 0
    outcomes: dict[int, str] = {}

    async def answer(ex: Exchange) -> Outcome:
        nonlocal calls
        calls += 1
        number = calls
        kind = ("answers", "cut after sending", "cut while connecting")[number % 3]
        if kind == "answers":
            # Counted as answered only once it has: on a busy machine the deadline may cut it
            # first, and a call cut with no word of how far it got may have billed (kept).
            outcomes[number] = "cut after sending"
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            outcomes[number] = kind
            return Outcome("ok", data=found("youcom"))
        outcomes[number] = kind
        ex.request_state = "sent" if kind == "cut after sending" else "unsent"
        await anyio.sleep_forever()
        raise AssertionError("not reached")

    youcom = FakeProvider("youcom", answer, 3_000, capability="search")
    exchanges, billed, spent = await hammer(policy, youcom, DispatchSettings(deadline=0.3))
    kept = sum(1 for kind in outcomes.values() if kind != "cut while connecting")
    assert spent == billed == kept * 3_000
    assert spent <= 10_000 and len(youcom.calls) == 3  # three reservations fit under the cap
    maybe = [a for ex in exchanges for a in ex.attempts if a.maybe_billed]
    assert len(maybe) == sum(1 for kind in outcomes.values() if kind == "cut after sending") >= 1
    assert all(a.cost_micros == 3_000 for a in maybe)


async def test_while_the_shared_store_is_unreachable_paid_is_skipped_with_the_reason_and_free_serves(
    redis_server: RedisServer,
) -> None:
    clock = clock_at(time.time())
    async with replica(redis_server.url) as link:
        book = RedisSpend(link, clock)
        await book.seed_period({}, utc_day(clock.now))
        policy = Budget({YOUCOM: 10_000}, book, clock)
        youcom, wiki = provider("youcom", 5_000), provider("wiki", 0)
        pipeline = build_pipeline({"youcom": youcom, "wiki": wiki}, [policy])
        with redis_server.stopped():
            with deadline(15):  # bounded by the command timeout, never a hang
                ex = routed("youcom", "wiki")
                await pipeline.run(ex)
    assert youcom.calls == [] and len(wiki.calls) == 1
    assert (
        Decision("dispatch", "budget", "skipped", "skipped youcom (state: redis unreachable)", provider="youcom")
        in ex.trace
    )
