"""Puts one usage line in the ledger for every tools/call that passed the pipeline: answered,
cached, failed and refused calls alike. Never the arguments or the result's text: the line is
read off the finished exchange, its receipt and its trace (ledger.line lists the fields).

    outcome    policies.metrics' label (ok, tool_error, rate_limited, denied …), or `cached`
               when the result cache answered the call at admit (`Exchange.cached`)
    rack       the premium rack rate of the call's capability, as assembled from the providers'
               list prices (the highest price among the capability's premium providers, on or
               not), stamped on the line when the call runs so that later price changes do not
               rewrite history; a plain tool's rack rate is its own price
    bytes      the result before and after the governor (its "shaped" decision), else its size
    tokens     est_tokens of those bytes, as the governor counts (characters / 4)

The sink only queues the line (ledger.writer writes it in a worker thread): the loop never waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from frugal_proxy.governor.shaping import est_tokens
from frugal_proxy.ledger.line import UsageLine, timestamp, usd
from frugal_proxy.policies import Policy
from frugal_proxy.policies.metrics import NO_PROVIDER, outcome_of, provider_of
from frugal_proxy.records import Exchange

RackRates = Mapping[str, tuple[str, int]]  # capability -> (provider, list price in micro-dollars)


class UsageSink(Protocol):
    """Where the lines go: ledger.writer.LedgerWriter (a list's `append` in tests)."""

    def append(self, line: UsageLine) -> None: ...


class Ledger(Policy):
    name = "ledger"

    def __init__(self, sink: UsageSink, rack: RackRates | None = None, clock: Callable[[], float] = time.time) -> None:
        self.sink = sink
        self.rack = dict(rack or {})
        self.clock = clock

    async def seal(self, exchange: Exchange) -> None:
        self.sink.append(usage_line(exchange, self.rack, self.clock()))


def usage_line(exchange: Exchange, rack: RackRates, now: float) -> UsageLine:
    """The ledger's line for a finished exchange."""
    receipt = exchange.receipt
    cost = receipt.cost_micros if receipt is not None else 0
    hit = exchange.cached is not None  # the result cache answered it at admit
    provider = None if hit else provider_of(exchange)
    capability = exchange.route.capability
    rate = rack.get(capability) if capability is not None else None
    returned = _size(exchange)
    total = returned
    for decision in exchange.trace:
        if decision.verdict == "shaped" and decision.bytes_in is not None:
            total = decision.bytes_in
            break
    billed: dict[str, int] = {}
    tables: dict[str, dict[str, int]] = {}  # provider -> capability table -> what it billed there
    served: dict[str, float] = {}
    free: list[str] = []
    table = capability or "tool"
    for attempt in exchange.attempts:  # one pass: a line is made for every call
        if attempt.cost_micros:
            billed[attempt.provider] = billed.get(attempt.provider, 0) + attempt.cost_micros
            split = tables.setdefault(attempt.provider, {})
            split[attempt.capability] = split.get(attempt.capability, 0) + attempt.cost_micros
        if attempt.outcome == "ok":
            served[attempt.provider] = attempt.latency_ms
        if attempt.free_quota:
            free.append(attempt.provider)
    return UsageLine(
        ts=timestamp(now),
        tool=exchange.call.tool,
        capability=capability,
        provider=None if provider == NO_PROVIDER else provider,
        outcome="cached" if hit else outcome_of(exchange),
        cost_usd=usd(cost),
        total_cost_usd=usd(receipt.total_micros if receipt is not None else 0),
        rack_usd=usd(rate[1] if rate is not None else cost),
        rack_provider=rate[0] if rate is not None else None,
        latency_ms=round((time.monotonic() - exchange.call.started_at) * 1000, 3),
        cached=hit,
        bytes_total=total,
        bytes_returned=returned,
        tokens_total=est_tokens(total),
        tokens_returned=est_tokens(returned),
        attempts=len(exchange.attempts),
        operator=exchange.operator,
        billed={name: usd(micros) for name, micros in billed.items()},
        served_ms=served,
        free_quota=free,
        billed_under={
            name: {where: usd(micros) for where, micros in split.items()}
            for name, split in tables.items()
            if split.keys() != {table}
        },
    )


def _size(exchange: Exchange) -> int:
    answer = exchange.answer
    if answer is None:
        return 0
    body = answer.get("result", answer.get("error"))
    return len(body) if body is not None else 0
