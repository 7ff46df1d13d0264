"""The month's receipt as figures: what `frugal-proxy stats` shows and `--json` prints. Sans-IO
apart from `tally_month`, which reads the month's files: every replica's, and the one file of a
month written before replica ids.

    calls       every line: answered, cached, failed and refused calls alike
    paid        what every attempt billed (failed attempts bill $0; a paid empty answer bills)
    maybe       the part of paid that may have been billed: paid requests cut or failed after
                they went out, with no answer saying whether the provider billed them
    rack        the premium rack rate of each call that produced a result (outcome ok or cached),
                as snapshotted in its line; failed, refused and empty calls earn none, and a call
                earns it once however many providers it tried
    saved       rack - paid (negative when the cheap route cost more than the premium one)
    kept out    est_tokens the governor cut from results (tokens_total - tokens_returned)

Rows group the calls by tool, provider and outcome (ok calls together, each other outcome on a
row of its own); days give each UTC day's calls, paid and rack, for the per-day bar.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from frugal_proxy.ledger import reader
from frugal_proxy.ledger.line import micros

CREDITED = frozenset({"ok", "cached"})
_RANK = {"ok": 0, "cached": 1}  # within a tool: answered rows, then cached, then the rest


class Tallied(msgspec.Struct, frozen=True, gc=False):
    """The fields of a line the receipt reads (the others are skipped when decoding)."""

    ts: str
    tool: str
    provider: str | None = None
    outcome: str = "ok"
    total_cost_usd: float = 0.0
    maybe_billed_usd: float = 0.0
    rack_usd: float = 0.0
    tokens_total: int = 0
    tokens_returned: int = 0


@dataclass
class Row:
    tool: str
    provider: str | None
    outcome: str
    calls: int = 0
    paid: int = 0  # micro-dollars, like every amount here
    maybe_billed: int = 0  # the part of paid that may have been billed


@dataclass
class Day:
    day: str  # YYYY-MM-DD
    calls: int = 0
    paid: int = 0
    rack: int = 0

    @property
    def saved(self) -> int:
        return self.rack - self.paid


@dataclass
class MonthTally:
    month: str
    calls: int = 0
    paid: int = 0
    maybe_billed: int = 0
    rack: int = 0
    tokens_kept_out: int = 0
    rows: list[Row] = field(default_factory=list)
    days: list[Day] = field(default_factory=list)
    skipped_lines: int = 0  # lines that did not decode (a torn last line after a crash)
    folder: Path | None = None  # the usage folder read
    files: list[Path] = field(default_factory=list)  # the files read
    replicas: list[str] = field(default_factory=list)  # their replica ids ("" for the one-file layout)

    @property
    def saved(self) -> int:
        return self.rack - self.paid

    @property
    def saved_percent(self) -> float | None:
        return None if self.rack == 0 else 100.0 * self.saved / self.rack

    @property
    def failed(self) -> int:
        return sum(row.calls for row in self.rows if row.outcome not in CREDITED)


def tally(month: str, batches: Iterable[list[Tallied]]) -> MonthTally:
    """Fold a month's lines (in batches, as ledger.reader gives them) into its receipt.

    Lines are counted by their distinct (tool, provider, outcome, amounts, day) with C-level
    iteration, and turned into micro-dollars once per distinct key: a million lines hold a few
    thousand of them."""
    counted: Counter[tuple[tuple[str, str | None, str, float, float, float], str]] = Counter()
    kept_out = 0
    for batch in batches:
        counted.update(zip(map(_key, batch), map(_day, map(_ts, batch)), strict=True))
        returned = list(map(_returned, batch))
        kept_out += sum(map(max, map(_total, batch), returned)) - sum(returned)  # per line, never below 0
    rows: dict[tuple[str, str | None, str], Row] = {}
    days: dict[str, Day] = {}
    for ((tool, provider, outcome, paid, maybe, rack), name), calls in counted.items():
        row = rows.get((tool, provider, outcome))
        if row is None:
            row = rows[(tool, provider, outcome)] = Row(tool, provider, outcome)
        day = days.get(name)
        if day is None:
            day = days[name] = Day(name)
        spent = calls * micros(paid)
        row.calls += calls
        row.paid += spent
        row.maybe_billed += calls * micros(maybe)
        day.calls += calls
        day.paid += spent
        if outcome in CREDITED:
            day.rack += calls * micros(rack)
    result = MonthTally(month, tokens_kept_out=kept_out)
    return _totalled(result, rows, days)


def merged(month: str, parts: Iterable[MonthTally]) -> MonthTally:
    """One receipt of several (each a tally of other lines of the same month): rows and days
    added up by their keys, amounts exact."""
    rows: dict[tuple[str, str | None, str], Row] = {}
    days: dict[str, Day] = {}
    result = MonthTally(month)
    for part in parts:
        result.tokens_kept_out += part.tokens_kept_out
        result.skipped_lines += part.skipped_lines
        for row in part.rows:
            kept = rows.setdefault((row.tool, row.provider, row.outcome), Row(row.tool, row.provider, row.outcome))
            kept.calls += row.calls
            kept.paid += row.paid
            kept.maybe_billed += row.maybe_billed
        for day in part.days:
            held = days.setdefault(day.day, Day(day.day))
            held.calls += day.calls
            held.paid += day.paid
            held.rack += day.rack
    return _totalled(result, rows, days)


def _totalled(result: MonthTally, rows: dict[tuple[str, str | None, str], Row], days: dict[str, Day]) -> MonthTally:
    """`result` with its rows and days in order and the month's totals added up from them."""
    result.rows = sorted(rows.values(), key=lambda r: (r.tool, _RANK.get(r.outcome, 2), r.outcome, -r.calls))
    result.days = [days[key] for key in sorted(days)]
    result.calls = sum(day.calls for day in result.days)
    result.paid = sum(day.paid for day in result.days)
    result.maybe_billed = sum(row.maybe_billed for row in result.rows)
    result.rack = sum(day.rack for day in result.days)
    return result


_key = operator.attrgetter("tool", "provider", "outcome", "total_cost_usd", "maybe_billed_usd", "rack_usd")
_ts = operator.attrgetter("ts")
_day = operator.itemgetter(slice(0, 10))
_total = operator.attrgetter("tokens_total")
_returned = operator.attrgetter("tokens_returned")


def tally_month(month: str, directory: Path | None = None) -> MonthTally:
    """The receipt of one UTC month (`YYYY-MM`) from every file of it in the usage folder; a
    month with no file has no calls."""
    files = reader.month_files(month, directory)
    damages = [reader.Damage(path) for path in files]
    result = tally(
        month,
        (batch for path, damage in zip(files, damages, strict=True) for batch in reader.batches(path, Tallied, damage)),
    )
    result.folder = reader.folder(directory)
    result.files = files
    result.replicas = [str(reader.replica_of(path, month)) for path in files]
    result.skipped_lines = sum(len(damage.lines) for damage in damages)
    for damage in damages:
        damage.warn()
    return result
