"""What the ledger gives back to the policies after a restart: spend, call counts, latencies.

    spend_on(day)             micro-dollars each provider billed on one UTC day, keyed
                              `capability/provider` as the daily budgets (`daily_budget_usd`,
                              per capability table) keep them
    billed_calls(month)       how many calls each paid provider billed this month, those billed
                              $0 on its free quota included: the free quotas
                              (`free_quota_monthly`) of the cheap strategy and the ceiling
    served_latencies()        the recent latencies of each provider's successful calls, oldest
                              first: the fast strategy's moving averages

Each takes `before`, a ledger timestamp: only lines written before it count. A process that
rebuilds its counters passes the moment it started, so that the calls it serves meanwhile,
counted live and written to the ledger too, are not counted twice.

Each reads every file of the month in the usage folder (ledger.reader.month_files: one per
replica, and a month's one file from before replica ids): on one machine that is what its
processes billed; on a volume the replicas of a fleet share, what the fleet billed, so a replica
that restarts counts the others' spend of the day too (its cap, kept in its memory, errs on the
safe side until a shared state backend keeps the books).

Each reads only the fields it needs. `spend_on` and `served_latencies` read each file from
its end and stop as soon as they have what they need, so a restart stays quick with a large
month; `billed_calls` reads the whole file. They block: call them in a worker thread.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterable
from pathlib import Path

import msgspec

from frugal_proxy.ledger import reader
from frugal_proxy.ledger.line import micros
from frugal_proxy.state.spend import spend_key
from frugal_proxy.state.usage import utc_month

# Lines reach the file in the order their processes wrote them, a batch at a time: a line may
# follow one up to this much newer. A backwards read goes this far past the start of its range.
REORDER_SLACK_SECONDS = 60.0
RECENT_SAMPLES = 20
MAX_SCAN = 200_000  # lines a latency read goes back at most


class _Billed(msgspec.Struct, frozen=True):
    ts: str
    capability: str | None = None
    billed: dict[str, float] = {}
    billed_under: dict[str, dict[str, float]] = {}
    free_quota: list[str] = []


class _Served(msgspec.Struct, frozen=True):
    ts: str
    served_ms: dict[str, float] = {}


Samples = dict[str, list[tuple[str, int, float]]]  # provider -> (ts, order within the file, latency)


def _ts(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def spend_on(day: str, directory: Path | None = None, before: str | None = None) -> dict[str, int]:
    """Micro-dollars each provider billed on `day` (UTC, `YYYY-MM-DD`), keyed `capability/provider`
    (`spend_key`); a plain tool's price counts under `tool/NAME`."""
    start = datetime.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=datetime.UTC).timestamp()
    enough = _ts(start - REORDER_SLACK_SECONDS)
    spent: dict[str, int] = {}
    for path in reader.month_files(day[:7], directory):
        for line in reader.newest_first(path, _Billed):
            if line.ts < enough:
                break
            if line.ts.startswith(day) and (before is None or line.ts < before):
                for provider, amount in line.billed.items():
                    split = line.billed_under.get(provider) or {line.capability or "tool": amount}
                    for table, part in split.items():
                        key = spend_key(table, provider)
                        spent[key] = spent.get(key, 0) + micros(part)
    return spent


def billed_calls(month: str, directory: Path | None = None, before: str | None = None) -> dict[str, int]:
    """How many calls each provider billed in `month`, those it answered on a unit of its free
    monthly quota ($0) included (free providers bill none)."""
    calls: dict[str, int] = {}
    for path in reader.month_files(month, directory):
        for line in reader.lines(path, _Billed):
            if before is not None and line.ts >= before:
                continue
            for provider in line.billed:  # once per table it billed under: one call each
                calls[provider] = calls.get(provider, 0) + len(line.billed_under.get(provider) or (None,))
            for provider in line.free_quota:
                calls[provider] = calls.get(provider, 0) + 1
    return calls


def served_latencies(
    providers: Iterable[str] | None = None,
    samples: int = RECENT_SAMPLES,
    now: float | None = None,
    directory: Path | None = None,
    before: str | None = None,
) -> dict[str, list[float]]:
    """Up to `samples` latencies (ms) of each provider's most recent successful calls, oldest
    first, from this UTC month and the one before, over every replica's file. With `providers`,
    the read of a file stops once each of them has its samples; without, after its last
    MAX_SCAN lines."""
    moment = time.time() if now is None else now
    wanted = set(providers) if providers is not None else None
    first = datetime.datetime.fromtimestamp(moment, datetime.UTC).replace(day=1)
    months = [utc_month(moment), utc_month((first - datetime.timedelta(days=1)).timestamp())]
    # One replica's file at a time, newest first; then the replicas' samples merged by time.
    by_replica: dict[str, Samples] = {}
    for month in months:
        for path in reader.month_files(month, directory):
            found = by_replica.setdefault(str(reader.replica_of(path, month)), {})
            if not _enough(found, wanted, samples):
                _recent(path, found, wanted, samples, before)
    merged: dict[str, list[float]] = {}
    for provider in sorted({name for found in by_replica.values() for name in found}):
        timed = sorted(sample for found in by_replica.values() for sample in found.get(provider, ()))
        merged[provider] = [latency for _, _, latency in timed[-samples:]]
    return merged


def _recent(path: Path, found: Samples, wanted: set[str] | None, samples: int, before: str | None) -> None:
    """Add the newest samples of one file to `found` (newest first), until there are enough; each
    as (ts, a sequence that orders the lines of one ts as the file does, latency)."""
    for scanned, line in enumerate(reader.newest_first(path, _Served), 1):
        if before is None or line.ts < before:
            for provider, latency in line.served_ms.items():
                if wanted is None or provider in wanted:
                    kept = found.setdefault(provider, [])
                    if len(kept) < samples:
                        kept.append((line.ts, -scanned, latency))
        if _enough(found, wanted, samples) or scanned >= MAX_SCAN:
            return


def _enough(found: Samples, wanted: set[str] | None, samples: int) -> bool:
    return wanted is not None and all(len(found.get(provider, ())) >= samples for provider in wanted)
