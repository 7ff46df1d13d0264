"""The routing policy orders and drops candidates before anything is called: every strategy,
its ties, free quotas, an explicit order, deny, and a pinned provider. Free quotas are exact
under concurrency: a unit is reserved before the call, given back when it did not bill, and
receipts, ledger, budget and ceiling agree on the price."""

from __future__ import annotations

from decimal import Decimal

import anyio
import pytest

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.config import CapabilityRouting
from frugal_proxy.ledger.line import UsageLine, micros
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.budget import Budget
from frugal_proxy.policies.ceiling import Ceiling
from frugal_proxy.policies.ledger import Ledger
from frugal_proxy.policies.routing import MIN_SAMPLES, Routing
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Attempt, Call, Decision, Exchange, Outcome, ProviderSpec, RequestState, Route
from frugal_proxy.state.latency import MemoryLatency
from frugal_proxy.state.spend import MemorySpend, spend_key
from frugal_proxy.state.usage import MemoryUsage, utc_month
from tests.pace import deadline
from tests.routed_calls import search

pytestmark = pytest.mark.anyio

# In the registry's documented order: ties keep it.
SPECS = [
    ProviderSpec("youcom-free", "search"),
    ProviderSpec("marginalia", "search"),
    ProviderSpec("serper", "search", 1_000, free_quota_monthly=2),
    ProviderSpec("youcom", "search", 5_000, premium=True),
    ProviderSpec("brave", "search", 5_000, premium=True),
]


def policy(**settings: object) -> Routing:
    return Routing({"search": CapabilityRouting(**settings)}, MemoryUsage(lambda: 1_780_000_000.0), MemoryLatency())  # type: ignore[arg-type]


def routed(request: SearchRequest | None = None, specs: list[ProviderSpec] = SPECS) -> Exchange:
    names = tuple(spec.name for spec in specs)
    ex = Exchange(Call(1, "frugal__search", {}), Route("frugal__search", names, capability="search"))
    ex.candidates = list(specs)
    ex.request = request or SearchRequest("q")
    return ex


def order(ex: Exchange) -> list[str]:
    return [spec.name for spec in ex.candidates]


def test_cheap_puts_free_quota_first_and_keeps_ties_in_their_order() -> None:
    ex = routed()
    policy().route(ex)
    # serper has free quota left this month: it costs 0 like the free ones, and keeps its place.
    assert order(ex) == ["youcom-free", "marginalia", "serper", "youcom", "brave"]
    assert ex.trace == [Decision("route", "cheap", "ordered", "effective cost ascending")]


def test_the_standing_order_is_what_a_call_would_try_now() -> None:
    """What the status page shows: the strategy and its order, `order` first, denied left out;
    the same order a call gets, and no trace written anywhere."""
    routing = policy(strategy="premium", order=["marginalia"], deny=["brave"])
    strategy, ordered = routing.standing_order("search", SPECS)
    assert (strategy, [spec.name for spec in ordered]) == ("premium", ["marginalia", "youcom", "serper", "youcom-free"])
    ex = routed()
    routing.route(ex)
    assert order(ex) == [spec.name for spec in ordered]
    assert policy().standing_order("extract", []) == ("cheap", [])


def test_a_used_up_quota_makes_a_provider_paid_again() -> None:
    routing = policy()
    routing.usage.seed({"serper": 2}, utc_month(1_780_000_000.0))  # the month's quota of 2, used
    reordered = routed(specs=[SPECS[2], SPECS[3], SPECS[0]])
    routing.route(reordered)
    assert order(reordered) == ["youcom-free", "serper", "youcom"]


def test_premium_goes_by_list_price_descending() -> None:
    ex = routed()
    policy(strategy="premium").route(ex)
    assert order(ex) == ["youcom", "brave", "serper", "youcom-free", "marginalia"]


async def test_fast_waits_for_history_then_follows_latency() -> None:
    routing = policy(strategy="fast")
    ex = routed(specs=SPECS[:3])
    routing.route(ex)
    assert order(ex) == ["youcom-free", "marginalia", "serper"]
    assert ex.trace[-1].detail == "cost order until there is latency history"
    for latency in ([900.0, 40.0, 300.0] for _ in range(MIN_SAMPLES)):
        sealed = routed(specs=SPECS[:3])
        sealed.attempts = [Attempt(spec.name, "ok", ms) for spec, ms in zip(SPECS[:3], latency, strict=True)]
        await routing.seal(sealed)
    again = routed(specs=SPECS[:3])
    routing.route(again)
    assert order(again) == ["marginalia", "serper", "youcom-free"]
    assert again.trace[-1].detail == "observed latency ascending"


def test_an_explicit_order_is_a_prefix_not_a_whitelist() -> None:
    ex = routed()
    policy(order=["brave", "not-configured"]).route(ex)
    assert order(ex) == ["brave", "youcom-free", "marginalia", "serper", "youcom"]
    assert ex.trace[-1].detail == "effective cost ascending, routing.search.order first (brave)"


def test_deny_drops_a_provider_and_says_so() -> None:
    ex = routed()
    policy(deny=["youcom-free"]).route(ex)
    assert "youcom-free" not in order(ex)
    assert ex.trace[0] == Decision(
        "route", "deny", "skipped", "skipped youcom-free (denied by routing.search.deny)", provider="youcom-free"
    )


def test_a_pinned_provider_is_tried_alone_and_a_denied_one_never() -> None:
    ex = routed(SearchRequest("q", provider="serper"))
    policy().route(ex)
    assert order(ex) == ["serper"]
    denied = routed(SearchRequest("q", provider="brave"))
    policy(deny=["brave"]).route(denied)
    assert denied.candidates == []
    assert denied.trace[-1].verdict == "refused"
    assert "brave is denied by routing.search.deny and is never called, not even when named" in denied.trace[-1].detail
    unknown = routed(SearchRequest("q", provider="google"))
    policy().route(unknown)
    assert unknown.candidates == [] and "no search provider named 'google' is on" in unknown.trace[-1].detail


async def test_a_quota_unit_is_reserved_before_the_call_and_given_back_when_it_did_not_bill() -> None:
    routing = policy()
    answers = iter([Outcome("transient", message="serper failed (503)"), Outcome("empty"), Outcome("ok", data=[])])

    async def answer(ex: Exchange) -> Outcome:
        assert "serper" in ex.free_quota  # reserved before the call
        return next(answers)

    serper = FakeProvider("serper", answer, 1_000, capability="search", free_quota_monthly=2)
    pipeline = build_pipeline({"serper": serper}, [routing])
    with deadline(5):
        failed = search("serper")
        await pipeline.run(failed)
        assert routing.usage.calls_this_month("serper") == 0 and failed.free_quota == set()
        empty = search("serper")
        await pipeline.run(empty)
    assert routing.usage.calls_this_month("serper") == 1  # an empty answer used a unit too
    assert empty.attempts == [
        Attempt("serper", "empty", empty.attempts[0].latency_ms, 0, free_quota=True, capability="search")
    ]
    assert routing.latency.estimate("serper") is None  # an empty answer says nothing of its speed


async def test_concurrent_calls_bill_exactly_the_quota_at_zero_and_the_rest_at_list_price() -> None:
    """20 concurrent calls against a quota of 5: exactly 5 answers at $0, 15 at $0.0010; the
    receipts, the ledger lines, the daily budget and the usage count agree."""
    quota, calls, price = 5, 20, 1_000
    routing = policy()
    spend = MemorySpend(lambda: 1_780_000_000.0)
    budget = Budget({spend_key("search", "serper"): 1_000_000}, spend, lambda: 1_780_000_000.0)
    lines: list[UsageLine] = []

    async def answer(ex: Exchange) -> Outcome:
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # the calls interleave between reserve and answer
        return Outcome("ok", data=[SearchHit("t", "https://serper.example/", "s", "serper")])

    serper = FakeProvider("serper", answer, price, capability="search", free_quota_monthly=quota)
    pipeline = build_pipeline({"serper": serper}, [routing, Ceiling(routing.usage), budget, Ledger(lines)])
    exchanges = [search("serper") for _ in range(calls)]
    with deadline(10):
        async with anyio.create_task_group() as tg:
            for ex in exchanges:
                tg.start_soon(pipeline.run, ex)
    costs = sorted(ex.receipt.cost_micros for ex in exchanges if ex.receipt is not None)
    assert costs == [0] * quota + [price] * (calls - quota)
    assert sum(ex.attempts[0].free_quota for ex in exchanges) == quota
    assert sum(micros(line.total_cost_usd) for line in lines) == sum(costs) == spend.spent("search/serper")
    assert sum(len(line.free_quota) for line in lines) == quota
    assert routing.usage.calls_this_month("serper") == quota


async def test_the_ceiling_skips_a_provider_whose_last_free_unit_another_call_took() -> None:
    """max_cost_usd 0 admits serper on its quota of 2 at routing; 6 concurrent calls route
    before any reaches it (a free provider fails first), so the 2 that get a unit are served by
    it at $0, the other 4 skip it at dispatch and fall to wiki."""
    routing = policy()

    def answering(name: str, kind: str = "ok") -> FakeProvider:
        async def answer(ex: Exchange) -> Outcome:
            await anyio.lowlevel.checkpoint()
            if kind != "ok":
                return Outcome("transient", message=f"{name} failed (503)")
            return Outcome("ok", data=[SearchHit("t", f"https://{name}.example/", "s", name)])

        return FakeProvider(name, answer, 1_000 if name == "serper" else 0, capability="search", free_quota_monthly=2)

    providers = {"down": answering("down", "error"), "serper": answering("serper"), "wiki": answering("wiki")}
    pipeline = build_pipeline(providers, [routing, Ceiling(routing.usage)])
    exchanges = [search("down", "serper", "wiki") for _ in range(6)]
    for ex in exchanges:
        ex.request = SearchRequest("q", max_cost_usd=Decimal(0))
    with deadline(10):
        async with anyio.create_task_group() as tg:
            for ex in exchanges:
                tg.start_soon(pipeline.run, ex)
    used = sorted(str(ex.receipt.provider_used) for ex in exchanges if ex.receipt is not None)
    assert used == ["serper"] * 2 + ["wiki"] * 4
    assert all(ex.receipt is not None and ex.receipt.total_micros == 0 for ex in exchanges)
    skipped = [d for ex in exchanges for d in ex.trace if d.phase == "dispatch" and d.verdict == "skipped"]
    assert len(skipped) == 4
    assert skipped[0] == Decision(
        "dispatch",
        "ceiling",
        "skipped",
        "skipped serper (other calls used up its free quota meanwhile; serper costs $0.0010 per call, "
        "above max_cost_usd $0.0000)",
        provider="serper",
    )


def test_a_name_given_twice_in_order_is_one_candidate() -> None:
    ex = routed()
    policy(order=["serper", "serper"]).route(ex)
    assert order(ex) == ["serper", "youcom-free", "marginalia", "youcom", "brave"]


@pytest.mark.parametrize(("state", "kept"), [("unsent", 0), ("sent", 1), (None, 1)])
async def test_a_cancelled_call_gives_its_quota_unit_back_unless_its_request_went_out(
    state: RequestState | None, kept: int
) -> None:
    """Cancelled while its request provably had not gone out (still connecting), the call gives
    its unit back; once it may have reached the provider (or the provider does not say), the
    unit may have been used, and stays used."""
    routing = policy()
    started = anyio.Event()

    async def hangs(ex: Exchange) -> Outcome:
        ex.request_state = state
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("not reached")

    serper = FakeProvider("serper", hangs, 1_000, capability="search", free_quota_monthly=2)
    pipeline = build_pipeline({"serper": serper}, [routing])
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipeline.run, search("serper"))
            await started.wait()
            assert routing.usage.calls_this_month("serper") == 1  # held while the call runs
            tg.cancel_scope.cancel()
    assert routing.usage.calls_this_month("serper") == kept


def test_a_pin_by_an_alias_or_in_another_case_is_its_provider_and_an_unknown_one_is_named() -> None:
    names = {"search": {"youcom-free": "youcom-free", "marginalia": "marginalia", "serper": "serper", "brave": "brave"}}
    names["search"]["you-free"] = "youcom-free"  # an alias
    known = Routing(
        {}, MemoryUsage(lambda: 1_780_000_000.0), MemoryLatency(), names=names, off={"brave": "no key: set BRAVE_KEY"}
    )
    for spelling in ("you-free", "SERPER"):
        pinned = routed(SearchRequest("q", provider=spelling))
        known.route(pinned)
        assert len(pinned.candidates) == 1 and pinned.trace[-1].verdict == "ordered"
    unknown = routed(SearchRequest("q", provider="serpr"))
    known.route(unknown)
    assert unknown.candidates == []
    assert unknown.trace[-1].detail == (
        "'serpr' is not one of the search providers (did you mean 'serper'?); "
        "known: youcom-free, marginalia, serper, brave, you-free; on: youcom-free, marginalia, serper, youcom, brave"
    )
    off = routed(SearchRequest("q", provider="brave"), SPECS[:3])
    known.route(off)
    assert off.candidates == [] and off.trace[-1].detail.endswith("; brave is off: no key: set BRAVE_KEY")
