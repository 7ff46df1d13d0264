"""Daily spend caps: `daily_budget_usd` in a provider's table (`[search_providers.NAME]` …).

A provider whose next call would take its spend this UTC day past its cap is skipped (`budget:
skipped youcom (…)`), and a call that pins it is refused; a call that lands exactly on the cap
goes ahead. The counters reset at UTC midnight. Exact under concurrency: dispatch reserves the
price just before the provider is called (`before_call`; a cap that other calls' spend leaves no
room under meanwhile is a skip there) and releases it when the provider did not bill
(`after_call`: an error status, a call cut or cancelled before its request went out), so no
number of concurrent calls takes a provider past its cap. A call cut by the deadline or a cancel
after its request may have reached the provider keeps it: it may have been billed
(`Outcome.maybe_billed`), and the cap counts it. A free provider never spends, so its cap
never bites, nor a call that holds a unit of its free monthly quota (billed $0; routing reserves
the unit first). Caps are per capability table: the key is `capability/provider`. Dispatch runs
the hooks only for providers that have a cap (`takes_part`), so a plain tool pays nothing here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from frugal_proxy import money
from frugal_proxy.config import format_duration
from frugal_proxy.policies import Policy
from frugal_proxy.policies.routing import has_quota
from frugal_proxy.records import Decision, Exchange, Outcome, ProviderSpec, billed
from frugal_proxy.state.redis_link import Unreachable
from frugal_proxy.state.seeding import StillSeeding
from frugal_proxy.state.spend import SpendBook, seconds_to_midnight, spend_key


class Budget(Policy):
    name = "budget"
    reserves = True

    def __init__(self, caps: Mapping[str, int], book: SpendBook, clock: Callable[[], float] = time.time) -> None:
        self.caps = dict(caps)  # spend_key -> micro-dollars a UTC day
        self.book = book
        self.clock = clock

    def _cap(self, spec: ProviderSpec) -> int | None:
        return None if spec.free else self.caps.get(spend_key(spec.capability, spec.name))

    def takes_part(self, spec: ProviderSpec) -> bool:
        # A provider with no cap (a plain tool, a free provider) never reserves: no hooks for it.
        return self._cap(spec) is not None

    def standing(self) -> list[tuple[str, int, int]]:
        """Each capped provider's `capability/provider` key, its cap and its spend today (its
        reservations included), in micro-dollars: what /metrics shows."""
        return [(key, cap, self.book.spent(key)) for key, cap in self.caps.items()]

    def _resets(self) -> str:
        return f"resets at 00:00 UTC, in {format_duration(seconds_to_midnight(self.clock()))}"

    def route(self, exchange: Exchange) -> None:
        if not self.caps:
            return
        kept: list[ProviderSpec] = []
        spent_out: list[tuple[ProviderSpec, int, int]] = []
        for spec in exchange.candidates:
            cap = self._cap(spec)
            spent = self.book.spent(spend_key(spec.capability, spec.name)) if cap is not None else 0
            # One with a free quota may be billed $0: its price is checked when it is called.
            if cap is not None and (spent >= cap or (spent + spec.price_micros > cap and not has_quota(spec))):
                spent_out.append((spec, spent, cap))
            else:
                kept.append(spec)
        if not spent_out:
            return
        exchange.candidates = kept
        if isinstance(getattr(exchange.request, "provider", None), str) and not kept:
            spec, spent, cap = spent_out[0]
            why = (
                f"{spec.name} has spent {_spent_of(spec, spent, cap)} "
                f"({self._resets()}): leave provider out to use another provider"
            )
            exchange.trace.append(Decision("route", self.name, "refused", why, provider=spec.name))
            return
        for spec, spent, cap in spent_out:
            why = f"skipped {spec.name} (it has spent {_spent_of(spec, spent, cap)}; {self._resets()})"
            exchange.trace.append(Decision("route", self.name, "skipped", why, provider=spec.name))

    async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
        cap = self._cap(spec)
        if cap is None or spec.name in exchange.free_quota:
            return None  # no cap, or billed $0 on a unit of its free quota: nothing to reserve
        try:
            day = await self.book.reserve(
                spend_key(spec.capability, spec.name), spec.price_micros, cap, exchange.deadline
            )
        except (StillSeeding, Unreachable) as waited:
            return str(waited)  # unreachable: `state: redis unreachable`, and the next candidate is tried
        if day is None:
            spent = self.book.spent(spend_key(spec.capability, spec.name))
            if spent < cap:
                return (
                    f"other calls left {money.format_usd(cap - spent)} of its {money.format_usd(cap)} daily budget "
                    f"meanwhile, and a call costs {money.format_usd(spec.price_micros)}; {self._resets()}"
                )
            return f"other calls reached its {money.format_usd(cap)} daily budget meanwhile; {self._resets()}"
        exchange.reservations[(self.name, spec.name)] = day
        return None

    async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
        day = exchange.reservations.pop((self.name, spec.name), None)
        if day is not None and not billed(outcome):
            await self.book.release(spend_key(spec.capability, spec.name), spec.price_micros, day)  # it did not bill
        return None


def _spent_of(spec: ProviderSpec, spent: int, cap: int) -> str:
    """`$0.0090 of its $0.0100 daily budget`, and what a call costs when that is what does not fit."""
    shown = f"{money.format_usd(spent)} of its {money.format_usd(cap)} daily budget"
    return shown if spent >= cap else f"{shown}, and a call costs {money.format_usd(spec.price_micros)}"
