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
A sink that can build lines too (`append_later`, the writer's) gets the call's facts instead,
read off the exchange at seal (its clock and its latency then), and makes the line in its worker:
formatting the timestamp and the amounts and building the line cost the loop about 8 µs a call,
and the exchange (with its answer) is not kept past the seal. The worker still holds the GIL while
it makes a line, so the line is made lean: nothing of what a call billed is built when it billed
nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

import msgspec

from frugal_proxy.governor.shaping import est_tokens
from frugal_proxy.ledger.line import UsageLine, timestamp, usd
from frugal_proxy.policies import Policy
from frugal_proxy.policies.metrics import NO_PROVIDER, outcome_of, provider_of
from frugal_proxy.records import Attempt, Exchange, Receipt

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
        # A sink that builds lines in its own worker (ledger.writer): `append_later(make, *args)`.
        self._later: Callable[..., None] | None = getattr(sink, "append_later", None)

    async def seal(self, exchange: Exchange) -> None:
        facts = facts_of(exchange, self.clock())
        if self._later is not None:
            self._later(line_of, facts, self.rack)
        else:
            self.sink.append(line_of(facts, self.rack))


class Facts(msgspec.Struct, frozen=True):
    """What a usage line says of one finished exchange, read off it at seal: `line_of` makes the
    line from these alone, so it may run later (in the ledger's worker) and give the same line."""

    now: float  # the wall clock at seal: the line's ts
    latency_ms: float  # the whole call, as far as the seal
    tool: str
    capability: str | None
    provider: str | None
    outcome: str  # `cached` when the result cache answered it at admit
    receipt: Receipt | None
    attempts: tuple[Attempt, ...]  # a copy: the worker reads it after the seal
    bytes_total: int
    bytes_returned: int
    operator: str


def facts_of(exchange: Exchange, now: float) -> Facts:
    """The facts of a finished exchange whose seal runs at `now` (the wall clock)."""
    latency = time.monotonic() - exchange.call.started_at
    hit = exchange.cached is not None  # the result cache answered it at admit
    provider = None if hit else provider_of(exchange)
    returned = _size(exchange)
    total = returned
    for decision in exchange.trace:
        if decision.verdict == "shaped" and decision.bytes_in is not None:
            total = decision.bytes_in
            break
    return Facts(
        now,
        latency * 1000,
        exchange.call.tool,
        exchange.route.capability,
        None if provider == NO_PROVIDER else provider,
        "cached" if hit else outcome_of(exchange),
        exchange.receipt,
        tuple(exchange.attempts),
        total,
        returned,
        exchange.operator,
    )


def usage_line(exchange: Exchange, rack: RackRates, now: float) -> UsageLine:
    """The ledger's line for a finished exchange."""
    return line_of(facts_of(exchange, now), rack)


def line_of(facts: Facts, rack: RackRates) -> UsageLine:
    """The ledger's line of an exchange's facts."""
    receipt = facts.receipt
    cost = receipt.cost_micros if receipt is not None else 0
    capability = facts.capability
    rate = rack.get(capability) if capability is not None else None
    total, returned = facts.bytes_total, facts.bytes_returned
    billed: dict[str, int] = {}
    tables: dict[str, dict[str, int]] = {}  # provider -> capability table -> what it billed there
    served: dict[str, float] = {}
    free: list[str] = []
    maybe = 0
    table = capability or "tool"
    for attempt in facts.attempts:  # one pass: a line is made for every call
        if attempt.maybe_billed:
            maybe += attempt.cost_micros
        if attempt.cost_micros:
            billed[attempt.provider] = billed.get(attempt.provider, 0) + attempt.cost_micros
            split = tables.setdefault(attempt.provider, {})
            split[attempt.capability] = split.get(attempt.capability, 0) + attempt.cost_micros
        if attempt.outcome == "ok":
            served[attempt.provider] = attempt.latency_ms
        if attempt.free_quota:
            free.append(attempt.provider)
    line = UsageLine(
        ts=timestamp(facts.now),
        tool=facts.tool,
        capability=capability,
        provider=facts.provider,
        outcome=facts.outcome,
        cost_usd=usd(cost),
        total_cost_usd=usd(receipt.total_micros if receipt is not None else 0),
        rack_usd=usd(rate[1] if rate is not None else cost),
        rack_provider=rate[0] if rate is not None else None,
        latency_ms=round(facts.latency_ms, 3),
        cached=facts.outcome == "cached",
        bytes_total=total,
        bytes_returned=returned,
        tokens_total=est_tokens(total),
        tokens_returned=est_tokens(returned),
        attempts=len(facts.attempts),
        operator=facts.operator,
        served_ms=served,
        free_quota=free,
    )
    if not billed:
        # Nothing billed (most calls): `billed` and `billed_under` stay empty, without the two
        # comprehensions (each a function call on 3.11, about 1 µs even over an empty dict) or
        # their keywords (a line is made under the GIL for every call).
        return line
    return msgspec.structs.replace(
        line,
        billed={name: usd(micros) for name, micros in billed.items()},
        billed_under={
            name: {where: usd(micros) for where, micros in split.items()}
            for name, split in tables.items()
            if split.keys() != {table}
        },
        maybe_billed_usd=usd(maybe),
    )


def _size(exchange: Exchange) -> int:
    answer = exchange.answer
    if answer is None:
        return 0
    body = answer.get("result", answer.get("error"))
    return len(body) if body is not None else 0
