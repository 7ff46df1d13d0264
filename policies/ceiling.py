"""The per-call ceiling: `max_cost_usd` on every routed tool.

A candidate whose effective price (0 while it has free quota left this month, else its list
price) is above the ceiling is dropped before anything is called, each drop a Decision the
receipt's `skipped[]` and reason line show:

    ceiling: skipped youcom (youcom costs $0.0050 per call, above max_cost_usd $0.0010)

A provider admitted at $0 on its free quota whose last unit other calls took meanwhile is
checked again just before it is called (`before_call`, after routing reserved or failed to
reserve the unit): at its list price it is a skip there when above what is left of the ceiling.

`0` means free providers only. A call that pins a provider above the ceiling is refused before
any spend; when nothing fits, the refusal names the cheapest configured provider and its price,
so the agent knows what ceiling would do. On `frugal__execute` the fall-forward to a browser is
routed again: what the extraction already cost comes off the ceiling first.
"""

from __future__ import annotations

from decimal import Decimal

from frugal_proxy import money
from frugal_proxy.policies import Policy
from frugal_proxy.policies.routing import effective_cost, has_quota
from frugal_proxy.records import Decision, Exchange, ProviderSpec
from frugal_proxy.state.usage import UsageCounter


def ceiling_micros(amount: Decimal) -> int:
    """A ceiling in micro-dollars, rounded down (a ceiling finer than a micro-dollar cannot be
    met more exactly)."""
    numerator, denominator = amount.as_integer_ratio()  # exact: no 28-digit rounding before the floor
    return numerator * money.MICROS_PER_USD // denominator


class Ceiling(Policy):
    name = "ceiling"

    def __init__(self, usage: UsageCounter) -> None:
        self.usage = usage

    def takes_part(self, spec: ProviderSpec) -> bool:
        return has_quota(spec)  # only a quota's price can change between routing and the call

    async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
        limits = _ceiling_and_spent(exchange)
        if limits is None or spec.name in exchange.free_quota:
            return None
        ceiling, spent = limits
        if spec.price_micros <= ceiling - spent:
            return None
        return (
            f"other calls used up its free quota meanwhile; {spec.name} costs "
            f"{money.format_usd(spec.price_micros)} per call, above {_limit(ceiling, spent)}"
        )

    def route(self, exchange: Exchange) -> None:
        limits = _ceiling_and_spent(exchange)
        if limits is None or not exchange.candidates:
            return
        ceiling, spent = limits
        left = ceiling - spent
        kept: list[ProviderSpec] = []
        over: list[tuple[ProviderSpec, int]] = []
        for spec in exchange.candidates:
            price = effective_cost(spec, self.usage)
            if price <= left:
                kept.append(spec)
            else:
                over.append((spec, price))
        if not over:
            return
        exchange.candidates = kept
        limit = _limit(ceiling, spent)
        pinned = getattr(exchange.request, "provider", None)
        if isinstance(pinned, str) and not kept:
            spec, price = over[0]
            why = f"{spec.name} costs {money.format_usd(price)} per call, above {limit}"
            fix = f"raise max_cost_usd to {money.format_usd(price + spent)}, or leave provider out"
            exchange.trace.append(Decision("route", self.name, "refused", f"{why}: {fix}", provider=spec.name))
            return
        for spec, price in over:
            why = f"{spec.name} costs {money.format_usd(price)} per call, above {limit}"
            exchange.trace.append(
                Decision("route", self.name, "skipped", f"skipped {spec.name} ({why})", provider=spec.name)
            )
        if not kept:
            spec, price = min(over, key=lambda pair: pair[1])  # min() keeps the first of a tie
            capability = exchange.route.capability or "tool"
            exchange.trace.append(
                Decision(
                    "route",
                    self.name,
                    "refused",
                    f"no {capability} provider fits {limit}; the cheapest is {spec.name} at "
                    f"{money.format_usd(price)} per call: raise max_cost_usd to {money.format_usd(price + spent)}, "
                    "or leave it out",
                )
            )


def _ceiling_and_spent(exchange: Exchange) -> tuple[int, int] | None:
    """The call's ceiling and what its attempts billed so far (micro-dollars); None: no ceiling."""
    amount = getattr(exchange.request, "max_cost_usd", None)
    if amount is None:
        return None
    return ceiling_micros(amount), sum(attempt.cost_micros for attempt in exchange.attempts)


def _limit(ceiling: int, spent: int) -> str:
    limit = f"max_cost_usd {money.format_usd(ceiling)}"
    if spent:
        limit = f"the {money.format_usd(max(ceiling - spent, 0))} left of {limit} after {money.format_usd(spent)} spent"
    return limit
