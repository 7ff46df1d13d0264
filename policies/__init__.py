"""Routing strategies and guardrails: hooks that the pipeline runs at each phase.

A policy is a plain object with one method per phase, each a no-op by default. A hook fills in
a decision on the `Exchange` (an answer, a refusal, a reordered candidate list); it does no I/O
of its own unless that is its whole job (a cache, the ledger).

    prefetch     before admit: ask now for what admit will read (no waiting), so that a shared
                 store sends those reads with the phase's first command, in one round trip
    admit        before any provider: may answer or refuse the call
    route        order and drop the candidates, each drop a Decision
    before_call  dispatch, just before one provider is called: may still keep it back
                 (`takes_part` says for which providers dispatch asks at all)
    after_call   dispatch, after each answer (or none): may replace the outcome
    govern       reshape the answer (the size governor)
    seal         see the finished exchange and its receipt
"""

from __future__ import annotations

from typing import Any

from frugal_proxy.capabilities import normalized
from frugal_proxy.records import Exchange, Outcome, ProviderSpec


class Policy:
    """Base class with no-op hooks; override the phases a policy takes part in."""

    name = "policy"
    # Whether its after_call gives back something its before_call reserved (a budget, a free
    # quota unit) when the provider did not answer (no outcome, or one that is not "ok" or
    # "empty"; an answer billed what was reserved, so there is nothing to give back): dispatch
    # then settles it shielded from cancellation.
    reserves = False

    def prefetch(self, exchange: Exchange) -> None:
        """Before any admit hook runs: start the reads this policy's admit will await (a store's
        `lookup`), keeping them on the exchange; no I/O of its own and no waiting."""

    async def admit(self, exchange: Exchange) -> None:
        """May set `exchange.answer` to answer or refuse the call before any provider runs."""

    def route(self, exchange: Exchange) -> None:
        """May reorder or drop `exchange.candidates`, noting each drop as a `Decision` in `exchange.trace`."""

    def takes_part(self, spec: ProviderSpec) -> bool:
        """Whether `before_call` and `after_call` apply to calls of this provider at all;
        dispatch asks once per provider and leaves the hooks out where they do not (a budget
        on a provider with no cap, a quota on a provider with none)."""
        return True

    async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
        """Just before dispatch calls a provider: why it must not be called now (dispatch notes
        the skip and tries the next candidate), or None to go ahead."""
        return None

    async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
        """After each answer of a provider (`outcome`), or when there was none (None: kept back
        after `before_call`, or cancelled). May return the outcome to go on with instead."""
        return None

    async def govern(self, exchange: Exchange) -> None:
        """May reshape `exchange.answer` (the size governor's phase)."""

    async def seal(self, exchange: Exchange) -> None:
        """Sees the finished exchange and its receipt."""


def normalized_request(exchange: Exchange) -> Any:
    """The call's typed request as fingerprints see it: `capabilities.normalized` without its
    ceiling, worked out once per request (the loop guard and the result cache share it; a
    fall-forward's browse request is a new one)."""
    request = exchange.request
    known = exchange.derived.get("normalized")
    if known is not None and known[0] is request:
        return known[1]
    value = normalized(request, ceiling=False)
    exchange.derived["normalized"] = (request, value)
    return value
