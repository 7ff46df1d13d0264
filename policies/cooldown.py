"""The cooldown: a provider that answered with a rate limit is fenced off for a while.

`routing.cooldown` (default 60 s) is the window; a `Retry-After` longer than it extends the
fence, up to MAX_FENCE (10 minutes). Every provider, paid or free, and the upstreams of plain
tools too. While fenced, a provider is skipped at the route phase (`cooldown: skipped marginalia
(rate-limited; cooling down for another 42s)`), and at dispatch when another call fenced it in
the meantime; a call that pins it, or a plain tool whose one upstream it is, is refused with
the time to wait. An answer lifts the fence (the call's own retry after a short Retry-After
included).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from frugal_proxy.config import format_duration
from frugal_proxy.policies import Policy
from frugal_proxy.records import Decision, Exchange, Outcome, ProviderSpec
from frugal_proxy.state.cooldowns import CooldownBook

MAX_FENCE = 600.0


class Cooldown(Policy):
    name = "cooldown"

    def __init__(self, window: float, book: CooldownBook, clock: Callable[[], float] = time.time) -> None:
        self.window = window
        self.book = book
        self.clock = clock

    def fence_for(self, retry_after: float | None) -> float:
        """How long a rate limit fences its provider off."""
        if retry_after is None:
            return self.window
        return max(self.window, min(retry_after, MAX_FENCE))

    def _left(self, name: str, now: float) -> float | None:
        until = self.book.until(name)
        return until - now if until is not None and until > now else None

    def remaining(self, names: Iterable[str]) -> dict[str, float]:
        """Seconds left of each named provider's fence (0 for one that has none): /metrics."""
        now = self.clock()
        return {name: self._left(name, now) or 0.0 for name in names}

    def route(self, exchange: Exchange) -> None:
        now = self.clock()
        kept: list[ProviderSpec] = []
        fenced: list[tuple[ProviderSpec, float]] = []
        for spec in exchange.candidates:
            left = self._left(spec.name, now)
            if left is None:
                kept.append(spec)
            else:
                fenced.append((spec, left))
        if not fenced:
            return
        exchange.candidates = kept
        alone = exchange.route.capability is None or isinstance(getattr(exchange.request, "provider", None), str)
        if alone and not kept:
            spec, left = fenced[0]
            if exchange.route.capability is None:
                what, fix = f"upstream {spec.name!r}", "try again then"
            else:
                what, fix = spec.name, "wait, or leave provider out to use another provider"
            why = f"{what} was rate-limited and is cooling down for another {format_duration(left)}: {fix}"
            exchange.trace.append(Decision("route", self.name, "refused", why, provider=spec.name))
            return
        for spec, left in fenced:
            why = f"skipped {spec.name} (rate-limited; cooling down for another {format_duration(left)})"
            exchange.trace.append(Decision("route", self.name, "skipped", why, provider=spec.name))

    async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
        left = self._left(spec.name, self.clock())
        if left is None:
            return None
        return f"rate-limited meanwhile; cooling down for another {format_duration(left)}"

    async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
        if outcome is None:
            return None
        if outcome.kind == "rate_limited":
            await self.book.fence(spec.name, self.clock() + self.fence_for(outcome.retry_after))
        elif outcome.kind in ("ok", "empty") and self.book.until(spec.name) is not None:
            await self.book.lift(spec.name)  # only a fenced one: an answer costs no write
        return None
