"""How a route's candidates are ordered and which are dropped, before anything is called.

Per capability (`[routing.search]` …), or per `[routes.NAME]` for a plain tool served by several
upstreams:

    cheap     (default) effective cost ascending: a paid provider with free quota left this month
              counts as free; ties keep the documented order of the built-ins, then config order
    fast      this machine's observed latency of successful calls, lowest first, once every
              candidate has MIN_SAMPLES of them; cost order until then
    premium   premium-priced providers first, list price descending
    order     an explicit preference that goes first (a prefix, not a whitelist)
    deny      never called: not by fallback, not when pinned
    provider  a call that names one provider (`provider=`) is tried with it alone

Each drop is a Decision naming the provider (the receipt's `skipped[]`), and the ordering is one
Decision the reason line quotes (`policy=cheap: effective cost ascending`). At seal it feeds the
latency book that the next calls order by.

Free quotas are exact: just before a paid provider with `free_quota_monthly` is called
(`before_call`), a unit of its quota is reserved if one is left, and that call is billed $0
(`Exchange.free_quota`); once the quota is used up, its list price. A call that did not bill
gives its unit back (`after_call`); one cut after its request may have gone out keeps it. So N
concurrent calls against a quota Q < N bill exactly Q at $0 and N - Q at the list price, and the
receipt, the ledger line, the daily budget and the ceiling (which re-checks a provider whose unit
others took meanwhile) all see the same price. Once the month's quota is used up (as far as the
count `calls_this_month` shows), no unit is asked for: the call is billed its list price.
"""

from __future__ import annotations

from collections.abc import Mapping

from frugal_proxy.config import CapabilityRouting, unknown_name
from frugal_proxy.policies import Policy
from frugal_proxy.records import Decision, Exchange, Outcome, ProviderSpec, billed
from frugal_proxy.state.latency import LatencyBook
from frugal_proxy.state.redis_link import Unreachable
from frugal_proxy.state.seeding import StillSeeding
from frugal_proxy.state.usage import UsageCounter

MIN_SAMPLES = 3
_WHY = {
    "cheap": "effective cost ascending",
    "fast": "observed latency ascending",
    "premium": "premium first, list price descending",
}


def has_quota(spec: ProviderSpec) -> bool:
    """A paid provider with a free monthly quota: its price depends on what is left of it."""
    return spec.free_quota_monthly > 0 and not spec.free


def effective_cost(spec: ProviderSpec, usage: UsageCounter) -> int:
    """What one call of the provider counts as: 0 while it has free quota left this month, else
    its list price (micro-dollars)."""
    if has_quota(spec) and usage.calls_this_month(spec.name) < spec.free_quota_monthly:
        return 0
    return spec.price_micros


class Routing(Policy):
    name = "routing"
    reserves = True

    def __init__(
        self,
        settings: dict[str, CapabilityRouting],
        usage: UsageCounter,
        latency: LatencyBook,
        routes: dict[str, CapabilityRouting] | None = None,
        *,
        names: Mapping[str, Mapping[str, str]] | None = None,
        off: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        # Per capability, every name a provider answers to (aliases too) -> its own name, on or
        # off, and why the ones that are off are: what a pin by a name that is not on is told.
        self.names = {capability: dict(known) for capability, known in (names or {}).items()}
        self.folded = {kind: {name.casefold(): own for name, own in by.items()} for kind, by in self.names.items()}
        self.off = dict(off or {})
        self.routes = dict(routes or {})  # `[routes.NAME]`: a plain tool served by several upstreams
        self.usage = usage
        self.latency = latency

    def takes_part(self, spec: ProviderSpec) -> bool:
        return has_quota(spec)

    async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
        """Reserve a unit of the provider's free quota if one is left: the call is then billed $0."""
        if self.usage.calls_this_month(spec.name) >= spec.free_quota_monthly:
            # Used up: no unit to ask for, so the budget's reservation is the dispatch phase's one
            # round trip on a shared store. Its count is a mirror there, stale by one pub/sub
            # delivery: a unit a failed call elsewhere gave back that moment goes to a later call.
            return None
        try:
            month = await self.usage.reserve(spec.name, spec.free_quota_monthly, exchange.deadline)
        except (StillSeeding, Unreachable) as waited:
            return str(waited)  # unreachable: its price is not known, so it is not called
        if month is not None:
            exchange.reservations[(self.name, spec.name)] = month
            exchange.free_quota.add(spec.name)
        return None

    async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
        month = exchange.reservations.pop((self.name, spec.name), None)
        if billed(outcome):
            return None  # billed on its quota (or may have been: its request went out): the unit is spent
        if month is not None:
            exchange.free_quota.discard(spec.name)
            await self.usage.release(spec.name, month)  # it did not bill
        return None

    def route(self, exchange: Exchange) -> None:
        route = exchange.route
        if len(exchange.candidates) < 2 and route.capability is None:
            return  # a plain tool with one upstream: nothing to order
        found = self.settings.get(route.capability) if route.capability else self.routes.get(route.name)
        settings = found or CapabilityRouting()
        where = f"routing.{route.capability}" if route.capability else f"routes.{route.name}"
        kept: list[ProviderSpec] = []
        for spec in exchange.candidates:
            if spec.name in settings.deny:
                exchange.trace.append(
                    Decision(
                        "route", "deny", "skipped", f"skipped {spec.name} (denied by {where}.deny)", provider=spec.name
                    )
                )
            else:
                kept.append(spec)
        pinned = getattr(exchange.request, "provider", None)
        if isinstance(pinned, str):
            kept = self._pin(exchange, kept, pinned, where)
            exchange.candidates = kept
            return
        strategy = route.strategy or settings.strategy
        ordered, preferred = self._preferred(self._order(kept, strategy), settings)
        exchange.candidates = ordered
        why = (
            _WHY[strategy]
            if strategy != "fast" or self._has_history(kept)
            else "cost order until there is latency history"
        )
        if preferred:
            why += f", {where}.order first ({', '.join(preferred)})"
        exchange.trace.append(Decision("route", strategy, "ordered", why))

    def standing_order(self, capability: str, specs: list[ProviderSpec]) -> tuple[str, list[ProviderSpec]]:
        """A capability's strategy and the order a call would try these providers in now (the
        denied ones left out, no pin, before cooldowns and budgets drop any): the status page."""
        settings = self.settings.get(capability) or CapabilityRouting()
        kept = [spec for spec in specs if spec.name not in settings.deny]
        return settings.strategy, self._preferred(self._order(kept, settings.strategy), settings)[0]

    @staticmethod
    def _preferred(ordered: list[ProviderSpec], settings: CapabilityRouting) -> tuple[list[ProviderSpec], list[str]]:
        """`order`'s providers first; and which of them were there."""
        # A name given twice is one preference: a provider is one candidate, tried once.
        preferred = [name for name in dict.fromkeys(settings.order) if any(spec.name == name for spec in ordered)]
        if preferred:
            first = [next(spec for spec in ordered if spec.name == name) for name in preferred]
            ordered = first + [spec for spec in ordered if spec.name not in preferred]
        return ordered, preferred

    def _pin(self, exchange: Exchange, kept: list[ProviderSpec], pinned: str, where: str) -> list[ProviderSpec]:
        capability = exchange.route.capability or "tool"
        known = self.names.get(capability)
        folded = self.folded.get(capability, {})
        own = folded.get(pinned.casefold(), pinned)  # an alias, in any case
        chosen = [spec for spec in kept if spec.name == own]
        if chosen:
            exchange.trace.append(Decision("route", "pin", "ordered", f"pinned to {own} (tried alone)"))
            return chosen
        denied = any(spec.name == own for spec in exchange.candidates)
        names = ", ".join(spec.name for spec in kept) or "none"
        if denied:
            why = f"{own} is denied by {where}.deny and is never called, not even when named"
        elif known and pinned.casefold() not in folded:
            why = f"{unknown_name(pinned, f'one of the {capability} providers', known)}; on: {names}"
        else:
            why = f"no {capability} provider named {pinned!r} is on (available: {names})"
            if own in self.off:
                why += f"; {own} is off: {self.off[own]}"
        exchange.trace.append(Decision("route", "pin", "refused", why, provider=pinned))
        return []

    def _order(self, specs: list[ProviderSpec], strategy: str) -> list[ProviderSpec]:
        if strategy == "premium":
            return sorted(specs, key=lambda spec: (not spec.premium, -spec.price_micros))
        by_cost = sorted(specs, key=self._effective_cost)  # sorted() is stable: ties keep their order
        if strategy == "fast" and self._has_history(specs):
            return sorted(by_cost, key=lambda spec: self._latency(spec))
        return by_cost

    def _effective_cost(self, spec: ProviderSpec) -> int:
        return effective_cost(spec, self.usage)

    def _has_history(self, specs: list[ProviderSpec]) -> bool:
        return all((self.latency.estimate(spec.name) or (0.0, 0))[1] >= MIN_SAMPLES for spec in specs)

    def _latency(self, spec: ProviderSpec) -> float:
        known = self.latency.estimate(spec.name)
        return known[0] if known is not None else float("inf")

    async def seal(self, exchange: Exchange) -> None:
        if exchange.route.capability is None and len(exchange.route.providers) < 2:
            return  # a plain tool with one upstream: nothing to learn for ordering
        for attempt in exchange.attempts:
            if attempt.outcome == "ok":
                self.latency.observe(attempt.provider, attempt.latency_ms)
