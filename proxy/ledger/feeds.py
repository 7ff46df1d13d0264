"""What the ledger gives back to the policies after a restart: spend, call counts, latencies.

    spend_on(day)             micro-dollars each provider billed on one UTC day: the daily budget
                              counters (`daily_budget_usd`) start from it
    spend_by_day(month)       the same for every day of a month
    billed_calls(month)       how many calls each paid provider billed this month, those billed
                              $0 on its free quota included: the free quotas
                              (`free_quota_monthly`) of the cheap strategy and the ceiling
    served_latencies()        the recent latencies of each provider's successful calls, oldest
                              first: the fast strategy's moving averages
    feed_latency(book)        those latencies replayed into a LatencyBook
    feed_usage(counter)       billed_calls replayed into a UsageCounter

Each reads only the fields it needs. `spend_on` and `served_latencies` read the month's file from
its end and stop as soon as they have what they need, so a restart stays quick with a large
month; the month-wide ones read the whole file. They block: call them before serving starts, or
in a worker thread.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable
from pathlib import Path

import msgspec

from frugal_proxy.ledger import reader
from frugal_proxy.ledger.line import micros
from frugal_proxy.state.latency import LatencyBook
from frugal_proxy.state.usage import UsageCounter, utc_month

# Lines reach the file in the order their processes wrote them, a batch at a time: a line may
# follow one up to this much newer. A backwards read goes this far past the start of its range.
REORDER_SLACK_SECONDS = 60.0
RECENT_SAMPLES = 20
MAX_SCAN = 200_000  # lines a latency read goes back at most


class _Billed(msgspec.Struct, frozen=True):
    ts: str
    billed: dict[str, float] = {}
    free_quota: list[str] = []


class _Served(msgspec.Struct, frozen=True):
    ts: str
    served_ms: dict[str, float] = {}


def _ts(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def spend_on(day: str, directory: Path | None = None) -> dict[str, int]:
    """Micro-dollars each provider billed on `day` (UTC, `YYYY-MM-DD`)."""
    start = datetime.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=datetime.UTC).timestamp()
    enough = _ts(start - REORDER_SLACK_SECONDS)
    spent: dict[str, int] = {}
    for line in reader.newest_first(reader.month_path(day[:7], directory), _Billed):
        if line.ts < enough:
            break
        if line.ts.startswith(day):
            for provider, amount in line.billed.items():
                spent[provider] = spent.get(provider, 0) + micros(amount)
    return spent


def spend_by_day(month: str, directory: Path | None = None) -> dict[str, dict[str, int]]:
    """Per UTC day of `month`, the micro-dollars each provider billed."""
    days: dict[str, dict[str, int]] = {}
    for line in reader.lines(reader.month_path(month, directory), _Billed):
        if line.billed:
            spent = days.setdefault(line.ts[:10], {})
            for provider, amount in line.billed.items():
                spent[provider] = spent.get(provider, 0) + micros(amount)
    return days


def billed_calls(month: str, directory: Path | None = None) -> dict[str, int]:
    """How many calls each provider billed in `month`, those it answered on a unit of its free
    monthly quota ($0) included (free providers bill none)."""
    calls: dict[str, int] = {}
    for line in reader.lines(reader.month_path(month, directory), _Billed):
        for provider in line.billed:
            calls[provider] = calls.get(provider, 0) + 1
        for provider in line.free_quota:
            calls[provider] = calls.get(provider, 0) + 1
    return calls


def served_latencies(
    providers: Iterable[str] | None = None,
    samples: int = RECENT_SAMPLES,
    now: float | None = None,
    directory: Path | None = None,
) -> dict[str, list[float]]:
    """Up to `samples` latencies (ms) of each provider's most recent successful calls, oldest
    first, from this UTC month and the one before. With `providers`, the read stops once each
    of them has its samples; without, after the last MAX_SCAN lines."""
    moment = time.time() if now is None else now
    wanted = set(providers) if providers is not None else None
    found: dict[str, list[float]] = {}
    first = datetime.datetime.fromtimestamp(moment, datetime.UTC).replace(day=1)
    months = [utc_month(moment), utc_month((first - datetime.timedelta(days=1)).timestamp())]
    scanned = 0
    for month in months:
        for line in reader.newest_first(reader.month_path(month, directory), _Served):
            scanned += 1
            for provider, latency in line.served_ms.items():
                if wanted is None or provider in wanted:
                    kept = found.setdefault(provider, [])
                    if len(kept) < samples:
                        kept.append(latency)
            if _enough(found, wanted, samples) or scanned >= MAX_SCAN:
                return {provider: kept[::-1] for provider, kept in found.items()}
    return {provider: kept[::-1] for provider, kept in found.items()}


def _enough(found: dict[str, list[float]], wanted: set[str] | None, samples: int) -> bool:
    return wanted is not None and all(len(found.get(provider, ())) >= samples for provider in wanted)


def feed_latency(
    book: LatencyBook,
    providers: Iterable[str] | None = None,
    samples: int = RECENT_SAMPLES,
    now: float | None = None,
    directory: Path | None = None,
) -> None:
    """Replay the recent successful latencies into `book`, in the order they happened."""
    for provider, latencies in served_latencies(providers, samples, now, directory).items():
        for latency in latencies:
            book.observe(provider, latency)


def feed_usage(counter: UsageCounter, now: float | None = None, directory: Path | None = None) -> None:
    """Replay this month's billed calls into `counter`."""
    month = utc_month(time.time() if now is None else now)
    for provider, calls in billed_calls(month, directory).items():
        for _ in range(calls):
            counter.count(provider)
