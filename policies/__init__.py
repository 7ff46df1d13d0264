"""Routing strategies and guardrails: hooks that the pipeline runs at each phase.

A policy is a plain object with one method per phase, each a no-op by default. A hook fills in
a decision on the `Exchange` (an answer, a refusal, a reordered candidate list); it does no I/O
of its own unless that is its whole job (a cache, the ledger).
"""

from __future__ import annotations

from frugal_proxy.records import Exchange


class Policy:
    """Base class with no-op hooks; override the phases a policy takes part in."""

    name = "policy"

    async def admit(self, exchange: Exchange) -> None:
        """May set `exchange.answer` to answer or refuse the call before any provider runs."""

    def route(self, exchange: Exchange) -> None:
        """May reorder or drop `exchange.candidates`, noting each drop as a `Decision` in `exchange.trace`."""

    async def govern(self, exchange: Exchange) -> None:
        """May reshape `exchange.answer` (the size governor's phase)."""

    async def seal(self, exchange: Exchange) -> None:
        """Sees the finished exchange and its receipt."""
