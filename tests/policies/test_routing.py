"""The routing policy orders and drops candidates before anything is called: every strategy,
its ties, free quotas, an explicit order, deny, and a pinned provider."""

from __future__ import annotations

import pytest

from frugal_proxy.capabilities import SearchRequest
from frugal_proxy.config import CapabilityRouting
from frugal_proxy.policies.routing import MIN_SAMPLES, Routing
from frugal_proxy.records import Attempt, Call, Decision, Exchange, ProviderSpec, Route
from frugal_proxy.state.latency import MemoryLatency
from frugal_proxy.state.usage import MemoryUsage

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


def test_a_used_up_quota_makes_a_provider_paid_again() -> None:
    routing = policy()
    routing.usage.count("serper")
    routing.usage.count("serper")
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


async def test_seal_counts_billed_answers_for_the_quota() -> None:
    routing = policy()
    ex = routed()
    ex.attempts = [Attempt("marginalia", "transient", 5.0), Attempt("serper", "empty", 9.0, 1_000)]
    await routing.seal(ex)
    assert routing.usage.calls_this_month("serper") == 1 and routing.usage.calls_this_month("marginalia") == 0
    assert routing.latency.estimate("serper") is None  # an empty answer says nothing of its speed


def test_a_name_given_twice_in_order_is_one_candidate() -> None:
    ex = routed()
    policy(order=["serper", "serper"]).route(ex)
    assert order(ex) == ["serper", "youcom-free", "marginalia", "youcom", "brave"]
