"""The per-call ceiling drops providers above `max_cost_usd` before anything is called: its
messages, 0 as free only, a pinned provider above it, nothing fitting, free quota, and the
fall-forward of frugal__execute paying out of what is left."""

from __future__ import annotations

from decimal import Decimal

import pytest

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.ceiling import Ceiling, ceiling_micros
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Attempt, Call, Decision, Exchange, Outcome, ProviderSpec, Route
from frugal_proxy.state.usage import MemoryUsage, utc_month
from tests.pace import deadline

pytestmark = pytest.mark.anyio

SPECS = [
    ProviderSpec("wikipedia", "search"),
    ProviderSpec("serper", "search", 1_000),
    ProviderSpec("youcom", "search", 5_000),
]


def routed(request: SearchRequest, specs: list[ProviderSpec] = SPECS) -> Exchange:
    route = Route("frugal__search", tuple(spec.name for spec in specs), capability="search")
    ex = Exchange(Call(1, "frugal__search", {}), route)
    ex.candidates = list(specs)
    ex.request = request
    return ex


def names(ex: Exchange) -> list[str]:
    return [spec.name for spec in ex.candidates]


def ceiling() -> Ceiling:
    return Ceiling(MemoryUsage(lambda: 1_780_000_000.0))


def test_providers_above_the_ceiling_are_skipped_with_their_price() -> None:
    ex = routed(SearchRequest("q", max_cost_usd=Decimal("0.001")))
    ceiling().route(ex)
    assert names(ex) == ["wikipedia", "serper"]  # at the ceiling is within it
    assert ex.trace == [
        Decision(
            "route",
            "ceiling",
            "skipped",
            "skipped youcom (youcom costs $0.0050 per call, above max_cost_usd $0.0010)",
            provider="youcom",
        )
    ]


def test_no_ceiling_keeps_everyone_and_zero_means_free_only() -> None:
    free = routed(SearchRequest("q"))
    ceiling().route(free)
    assert names(free) == ["wikipedia", "serper", "youcom"] and free.trace == []
    zero = routed(SearchRequest("q", max_cost_usd=Decimal(0)))
    ceiling().route(zero)
    assert names(zero) == ["wikipedia"]
    assert [d.provider for d in zero.trace] == ["serper", "youcom"]


def test_free_quota_left_counts_as_free() -> None:
    policy = ceiling()
    quota = [ProviderSpec("serper", "search", 1_000, free_quota_monthly=1)]
    ex = routed(SearchRequest("q", max_cost_usd=Decimal(0)), quota)
    policy.route(ex)
    assert names(ex) == ["serper"]
    policy.usage.seed({"serper": 1}, utc_month(1_780_000_000.0))
    used = routed(SearchRequest("q", max_cost_usd=Decimal(0)), quota)
    policy.route(used)
    assert names(used) == []


def test_a_pinned_provider_above_the_ceiling_is_refused() -> None:
    ex = routed(SearchRequest("q", provider="youcom", max_cost_usd=Decimal("0.001")), [SPECS[2]])
    ceiling().route(ex)
    assert ex.candidates == []
    assert ex.trace == [
        Decision(
            "route",
            "ceiling",
            "refused",
            "youcom costs $0.0050 per call, above max_cost_usd $0.0010: raise max_cost_usd to $0.0050, "
            "or leave provider out",
            provider="youcom",
        )
    ]


def test_when_nothing_fits_the_refusal_names_the_cheapest_provider() -> None:
    ex = routed(SearchRequest("q", max_cost_usd=Decimal("0.0005")), SPECS[1:])
    ceiling().route(ex)
    assert ex.candidates == []
    assert ex.trace[-1] == Decision(
        "route",
        "ceiling",
        "refused",
        "no search provider fits max_cost_usd $0.0005; the cheapest is serper at $0.0010 per call: "
        "raise max_cost_usd to $0.0010, or leave it out",
    )


def test_a_fall_forward_pays_out_of_what_is_left() -> None:
    browse = [ProviderSpec("chromium", "browse"), ProviderSpec("browserless", "browse", 2_000)]
    ex = routed(SearchRequest("q", max_cost_usd=Decimal("0.002")), browse)
    ex.attempts = [Attempt("jina", "ok", 5.0, 1_000)]  # the extraction already cost $0.001
    ceiling().route(ex)
    assert names(ex) == ["chromium"]
    assert ex.trace[-1].detail == (
        "skipped browserless (browserless costs $0.0020 per call, above the $0.0010 left of "
        "max_cost_usd $0.0020 after $0.0010 spent)"
    )


def test_a_ceiling_finer_than_a_micro_dollar_rounds_down() -> None:
    assert ceiling_micros(Decimal("0.0010009")) == 1_000
    assert ceiling_micros(Decimal(0)) == 0


async def test_refused_before_any_spend_through_the_pipeline() -> None:
    async def paid(ex: Exchange) -> Outcome:
        return Outcome("ok", data=[SearchHit("t", "https://a.example/", "s", "youcom")])

    youcom = FakeProvider("youcom", paid, 5_000, capability="search")
    pipeline = build_pipeline({"youcom": youcom}, [ceiling()])
    params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw({"query": "q"})}
    ex = Exchange(Call(1, "frugal__search", params), Route("frugal__search", ("youcom",), capability="search"))
    ex.request = SearchRequest("q", provider="youcom", max_cost_usd=Decimal("0.001"))
    with deadline(5):
        answer = await pipeline.run(ex)
    body = jsonrpc.decode_any(answer["result"])
    assert body["isError"] is True and youcom.calls == []
    assert body["content"][0]["text"] == (
        "frugal__search: ceiling: youcom costs $0.0050 per call, above max_cost_usd $0.0010: "
        "raise max_cost_usd to $0.0050, or leave provider out"
    )


def test_a_ceiling_is_floored_exactly_and_a_huge_one_is_refused() -> None:
    # 28-digit decimal arithmetic would round this up to $0.005 and let a $0.005 provider in.
    assert ceiling_micros(Decimal("0.0049999999999999999999999999999")) == 4_999
    assert ceiling_micros(Decimal("0.001")) == 1_000
    with pytest.raises(ValueError, match="max_cost_usd"):
        SearchRequest("q", max_cost_usd=Decimal("1e999999"))
