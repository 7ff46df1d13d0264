"""The month's receipt as figures: what `frugal-proxy stats` shows and `--json` prints. Sans-IO
apart from `tally_month`, which reads the month's file.

    calls       every line: answered, cached, failed and refused calls alike
    paid        what every attempt billed (failed attempts bill $0; a paid empty answer bills)
    rack        the premium rack rate of each call that produced a result (outcome ok or cached),
                as snapshotted in its line; failed, refused and empty calls earn none, and a call
                earns it once however many providers it tried
    saved       rack - paid (negative when the cheap route cost more than the premium one)
    kept out    est_tokens the governor cut from results (tokens_total - tokens_returned)

Rows group the calls by tool, provider and outcome (ok calls together, each other outcome on a
row of its own); days give each UTC day's calls, paid and rack, for the per-day bar.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from frugal_proxy.ledger import reader
from frugal_proxy.ledger.line import micros

CREDITED = frozenset({"ok", "cached"})
_RANK = {"ok": 0, "cached": 1}  # within a tool: answered rows, then cached, then the rest


class Tallied(msgspec.Struct, frozen=True):
    """The fields of a line the receipt reads (the others are skipped when decoding)."""

    ts: str
    tool: str
    provider: str | None = None
    outcome: str = "ok"
    total_cost_usd: float = 0.0
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
    rack: int = 0
    tokens_kept_out: int = 0
    rows: list[Row] = field(default_factory=list)
    days: list[Day] = field(default_factory=list)
    skipped_lines: int = 0  # lines that did not decode (a torn last line after a crash)

    @property
    def saved(self) -> int:
        return self.rack - self.paid

    @property
    def saved_percent(self) -> float | None:
        return None if self.rack == 0 else 100.0 * self.saved / self.rack

    @property
    def failed(self) -> int:
        return sum(row.calls for row in self.rows if row.outcome not in CREDITED)


def tally(month: str, lines: Iterable[Tallied]) -> MonthTally:
    """Fold a month's lines into its receipt."""
    result = MonthTally(month)
    rows: dict[tuple[str, str | None, str], Row] = {}
    days: dict[str, Day] = {}
    kept_out = 0
    for line in lines:
        paid = micros(line.total_cost_usd)
        key = (line.tool, line.provider, line.outcome)
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row(line.tool, line.provider, line.outcome)
        row.calls += 1
        row.paid += paid
        day_key = line.ts[:10]
        day = days.get(day_key)
        if day is None:
            day = days[day_key] = Day(day_key)
        day.calls += 1
        day.paid += paid
        if line.outcome in CREDITED:
            day.rack += micros(line.rack_usd)
        if line.tokens_total > line.tokens_returned:  # a shaped result can come out larger: its receipt
            kept_out += line.tokens_total - line.tokens_returned
    result.rows = sorted(rows.values(), key=lambda r: (r.tool, _RANK.get(r.outcome, 2), r.outcome, -r.calls))
    result.days = [days[key] for key in sorted(days)]
    result.calls = sum(day.calls for day in result.days)
    result.paid = sum(day.paid for day in result.days)
    result.rack = sum(day.rack for day in result.days)
    result.tokens_kept_out = kept_out
    return result


def tally_month(month: str, directory: Path | None = None) -> MonthTally:
    """The receipt of one UTC month (`YYYY-MM`) from its file; a month with no file has no calls."""
    path = reader.month_path(month, directory)
    damage = reader.Damage(path)
    result = tally(month, reader.lines(path, Tallied, damage))
    result.skipped_lines = len(damage.lines)
    damage.warn()
    return result
