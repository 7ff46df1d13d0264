"""One line of the usage ledger: what one tools/call was, never what it said.

A line holds no arguments and no result text: the tool, who served it, the outcome, what it
billed and what the premium route would have cost, how big the result was before and after the
governor, and how long it took. Amounts are US dollars as JSON numbers with at most six decimals
(the shortest repr of micro-dollars / 10^6), read back with `micros`, exact far beyond any spend.

Every encoded line fits in one atomic append (`MAX_LINE`, PIPE_BUF): the few free-form strings
(tool, provider and operator names) are cut before a line could outgrow it.
"""

from __future__ import annotations

import math
import select
import time

import msgspec

from frugal_proxy.money import MICROS_PER_USD

# POSIX guarantees 512; Linux and macOS have 4096 (select.PIPE_BUF). A line, newline included,
# is never longer, so each one is a single write() that no other appender can split.
MAX_LINE: int = getattr(select, "PIPE_BUF", 512)
_NAME_CUTS = (128, 48, 16)  # how far names are shortened, step by step, for a line to fit
_MAX_ENTRIES = 16  # providers per line in `billed` and `served_ms` before the rest are dropped


class UsageLine(msgspec.Struct, frozen=True, kw_only=True):
    """One call that passed the pipeline (refused and failed ones included)."""

    ts: str  # UTC, ISO 8601 with milliseconds: "2026-07-14T09:30:01.123Z"
    tool: str  # the exposed name the client called
    capability: str | None  # search, extract, browse for a routed call; None for a plain tool
    provider: str | None  # who served it; for a failure the last one tried; None if none was
    outcome: str  # policies.metrics' outcome set, plus "cached"
    cost_usd: float  # the price of the answer the client got
    total_cost_usd: float  # what every attempt billed together
    rack_usd: float  # the premium rack rate of this call, snapshotted when it ran
    rack_provider: str | None  # whose list price that is (None: the call's own price)
    latency_ms: float  # the whole call, failover included
    cached: bool
    bytes_total: int  # the result before the governor
    bytes_returned: int  # what the client got
    tokens_total: int  # est_tokens of the above (bytes / 4, rounded up, as the governor counts)
    tokens_returned: int
    attempts: int
    operator: str
    billed: dict[str, float] = {}  # provider -> what it billed in this call, where not $0
    served_ms: dict[str, float] = {}  # provider -> latency of its successful attempt
    free_quota: list[str] = []  # providers that answered on a unit of their free monthly quota ($0)
    # provider -> capability table -> what it billed there, for a provider that billed under a
    # table other than the line's `capability` (an extraction that fell forward to a paid render
    # bills its extract provider under extract); the daily budgets are per table
    billed_under: dict[str, dict[str, float]] = {}
    # the part of total_cost_usd that may have been billed: paid requests cut (deadline, cancel) or
    # failed after they went out, with no answer saying whether the provider billed them
    maybe_billed_usd: float = 0.0
    v: int = 1


_encoder = msgspec.json.Encoder()


def usd(micros: int) -> float:
    """Micro-dollars as the ledger writes them."""
    return micros / MICROS_PER_USD


def micros(amount: float) -> int:
    """A ledger amount back in micro-dollars (exact: it was written from micro-dollars)."""
    return round(amount * MICROS_PER_USD)


_second: tuple[int, str] = (-1, "")  # the last second formatted: calls come many a second


def timestamp(epoch: float) -> str:
    """`2026-07-14T09:30:01.123Z` (UTC, milliseconds truncated)."""
    global _second
    whole = math.floor(epoch)
    known = _second
    if known[0] != whole:
        known = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole)))
    return f"{known[1]}{min(999, int((epoch - whole) * 1000)):03d}Z"


def month_of(ts: str) -> str:
    """`2026-07` of a line's timestamp: the file it goes to."""
    return ts[:7]


def encode(line: UsageLine) -> bytes:
    """The line as written, newline included, never longer than MAX_LINE."""
    data = _encoder.encode(line) + b"\n"
    for cut in _NAME_CUTS:
        if len(data) <= MAX_LINE:
            return data
        data = _encoder.encode(_shortened(line, cut)) + b"\n"
    if len(data) <= MAX_LINE:
        return data
    return (
        _encoder.encode(
            msgspec.structs.replace(_shortened(line, 8), billed={}, served_ms={}, free_quota=[], billed_under={})
        )
        + b"\n"
    )


def _shortened(line: UsageLine, cut: int) -> UsageLine:
    def short(name: str | None) -> str | None:
        return name if name is None or len(name) <= cut else name[: cut - 1] + "…"

    def entries(table: dict[str, float]) -> dict[str, float]:
        return {str(short(key)): value for key, value in list(table.items())[:_MAX_ENTRIES]}

    return msgspec.structs.replace(
        line,
        tool=str(short(line.tool)),
        capability=short(line.capability),
        provider=short(line.provider),
        rack_provider=short(line.rack_provider),
        operator=str(short(line.operator)),
        billed=entries(line.billed),
        served_ms=entries(line.served_ms),
        free_quota=[str(short(name)) for name in line.free_quota[:_MAX_ENTRIES]],
        billed_under={str(short(key)): value for key, value in list(line.billed_under.items())[:_MAX_ENTRIES]},
    )
