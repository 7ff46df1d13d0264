"""The result cache (`[cache] enabled = true`; off by default): a routed search or page read
answered from memory when the same question was answered lately.

Keys are exact: the capability and every argument that changes the answer (for a search: the
query, trimmed, `max_results`, `freshness`, a pinned `provider`; for a page: the URL, `formats`,
`max_chars`, a pinned `provider`), so `frugal__execute` shares entries with the direct tools.
`max_cost_usd` is not part of it: a hit costs $0, within any ceiling. A hit answers at
admission with the original `provider_used`, `cost_usd: 0`, `cached: true` and `cache_age_ms`;
nothing is called. Kept: answers with results (`search_ttl`, 5 min; `extract_ttl`, 15 min), in
`max_entries` (512) least recently used. Never: browse (a render is asked for fresh), an
extraction that fell forward to a render (or a page so short that it might), an empty answer
or an error, and a call with an
explicit `priority` (it asked for a way of routing, so it is routed).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from frugal_proxy.capabilities import Page
from frugal_proxy.config import CacheSettings, format_duration
from frugal_proxy.intents import MIN_EXTRACT_CHARS
from frugal_proxy.policies import Policy, normalized_request
from frugal_proxy.protocol import canonical
from frugal_proxy.records import CachedAnswer, Decision, Exchange, Outcome
from frugal_proxy.state.result_cache import ResultCache

_PREFETCH = "cache prefetch"  # exchange.derived: (key, the lookup prefetch started)
LOOKUP = "cache lookup"  # Exchange.derived: (None, (capability, hit)) once admit asked the store


def lookup_of(exchange: Exchange) -> tuple[str, bool] | None:
    """The capability the cache was asked about at admission and whether it had the answer;
    None when the cache was not asked (off, a call it does not serve, refused before it)."""
    noted = exchange.derived.get(LOOKUP)
    if noted is None:
        return None
    lookup: tuple[str, bool] = noted[1]
    return lookup


class ResultCachePolicy(Policy):
    name = "cache"

    def __init__(self, settings: CacheSettings, store: ResultCache, clock: Callable[[], float] = time.time) -> None:
        self.ttls = {capability: settings.ttl(capability) for capability in ("search", "extract", "browse")}
        self.store = store
        self.clock = clock

    def key(self, exchange: Exchange) -> str | None:
        """The call's cache key, or None for a call the cache does not serve; worked out once
        per route and request (admit's serves seal, unless a fall-forward changed them)."""
        route, request = exchange.route, exchange.request
        if route.capability is None:
            return None  # a plain tool
        known = exchange.derived.get(self.name)
        if known is not None and known[0][0] is route and known[0][1] is request:
            key: str | None = known[1]
            return key
        key = self._key(exchange)
        exchange.derived[self.name] = ((route, request), key)
        return key

    def _key(self, exchange: Exchange) -> str | None:
        capability = exchange.route.capability
        if capability is None or exchange.request is None or exchange.route.strategy is not None:
            return None
        if self.ttls.get(capability) is None:
            return None
        return canonical.digest([exchange.operator, capability, normalized_request(exchange)])

    def prefetch(self, exchange: Exchange) -> None:
        # Asked for before the loop guard's note: a shared store sends both in one round trip.
        key = self.key(exchange)
        if key is not None:
            exchange.derived[_PREFETCH] = (key, self.store.lookup(key))

    async def admit(self, exchange: Exchange) -> None:
        key = self.key(exchange)
        if key is None:
            return
        started = exchange.derived.pop(_PREFETCH, None)
        found = await (started[1] if started is not None and started[0] == key else self.store.get(key))
        exchange.derived[LOOKUP] = (None, (exchange.route.capability, found is not None))
        if found is None:
            return
        age_ms = round((self.clock() - found.stored_at) * 1000, 3)
        exchange.outcome = Outcome("ok", data=found.data)
        exchange.cached = CachedAnswer(found.provider, age_ms)
        why = f"answered from the cache: {found.provider}'s answer of {format_duration(age_ms / 1000)} ago"
        exchange.trace.append(Decision("admit", self.name, "answered", why))

    async def seal(self, exchange: Exchange) -> None:
        outcome, receipt = exchange.outcome, exchange.receipt
        if exchange.cached is not None or outcome is None or outcome.kind != "ok" or receipt is None:
            return
        if receipt.provider_used is None or not outcome.data:
            return
        if isinstance(outcome.data, Page) and outcome.data.is_empty(MIN_EXTRACT_CHARS):
            return  # a page that may need a browser: frugal__execute would render it
        key = self.key(exchange)  # after a fall-forward the route is browse's: not kept
        ttl = self.ttls.get(exchange.route.capability or "")
        if key is not None and ttl is not None:
            await self.store.put(key, receipt.provider_used, outcome.data, ttl)
