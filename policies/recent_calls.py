"""Feeds the status page's ring of recent calls (state.recent_calls) from the seal phase.

One `CallRecord` per finished tools/call, read off the sealed exchange as the metrics hook
reads it: the route's name (the call's tool name when it matched no route the proxy knows is
still the exposed name the client called, cut to 128 characters), the capability, the provider
used, each attempt's outcome, latency and cost, what the governor cut, and the operator whose
call it was (the status page shows an operator its own calls). Never the arguments, the
result, nor an attempt's error text (an upstream's message may quote either).
"""

from __future__ import annotations

import logging
import time

from frugal_proxy.policies import Policy
from frugal_proxy.policies.metrics import CACHED, outcome_of
from frugal_proxy.records import Exchange
from frugal_proxy.state.recent_calls import AttemptRecord, CallRecord, RecentCalls

log = logging.getLogger("frugal_proxy.ui")

MAX_TOOL_CHARS = 128


class RecentCallsPolicy(Policy):
    name = "recent_calls"

    def __init__(self, book: RecentCalls) -> None:
        self.book = book
        self._failed = False  # a failure was said (once: a broken ring would say it every call)

    async def seal(self, exchange: Exchange) -> None:
        """Record the call; a record that cannot be made is said once and never raises into
        the pipeline (the page is a view: the call and its ledger line go on)."""
        try:
            self.record(exchange)
        except Exception as error:
            if not self._failed:
                self._failed = True
                log.warning("the status page's ring could not record a call", extra={"error": repr(error)})

    def record(self, exchange: Exchange) -> None:
        receipt = exchange.receipt
        attempts = tuple(
            AttemptRecord(a.provider, a.outcome, round(a.latency_ms, 2), a.cost_micros, a.retries, a.free_quota)
            for a in exchange.attempts
        )
        cut = 0
        for decision in exchange.trace:
            if decision.verdict == "shaped" and decision.bytes_in is not None and decision.bytes_out is not None:
                cut = max(0, decision.bytes_in - decision.bytes_out)
                break
        if exchange.cached is not None:
            provider: str | None = exchange.cached.provider
        elif receipt is not None:
            provider = receipt.provider_used
        else:
            provider = None
        self.book.add(
            CallRecord(
                at=self.book.clock(),
                tool=exchange.call.tool[:MAX_TOOL_CHARS],
                capability=exchange.route.capability,
                provider=provider,
                outcome=CACHED if exchange.cached is not None else outcome_of(exchange),
                cost_micros=receipt.total_micros if receipt is not None else sum(a.cost_micros for a in attempts),
                latency_ms=round((time.monotonic() - exchange.call.started_at) * 1000, 2),
                cut_bytes=cut,
                attempts=attempts,
                operator=exchange.operator,
                number=self.book.total + 1,
            )
        )
