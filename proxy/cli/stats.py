"""`frugal-proxy stats [--month YYYY-MM] [--dir FOLDER] [--json]`: the month's receipt from the
usage ledger, every replica's file of the month in the usage folder.

    frugal receipt · July 2026 (UTC)
    tool      provider     calls       paid
    search    marginalia       1    $0.0000
    total                      1    $0.0000
    same calls at premium rack rate*   $0.0050
    …
    per day   █ paid  ░ saved

The figures are ledger.tally's; this module only lays them out (with rich: colour where the
terminal has it, plain text in a pipe or with NO_COLOR) or prints them as JSON for scripts.
"""

from __future__ import annotations

import argparse
import calendar
import datetime
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from frugal_proxy import ledger, logs, money
from frugal_proxy.ledger import reader
from frugal_proxy.ledger.tally import CREDITED, MonthTally, Row, tally_month
from frugal_proxy.state.usage import utc_month

BAR_WIDTH = 32
ROUTED_PREFIX = "frugal__"
FOOTNOTE = (
    "* rack rate = list price of each capability's premium provider, snapshotted at call time.\n"
    "  failed calls excluded."
)
MAYBE_FOOTNOTE = (
    "† paid calls cut (deadline, cancel) or failed after their request went out: the provider may\n"
    "  have billed them, so they count as spent and against the daily budgets."
)
_NOTES = {
    "cached": "cached",
    "denied": "refused",
    "empty": "no results",
    "tool_error": "tool error",
    "rpc_error": "error",
    "input_required": "input required",
    "no_provider": "no provider",
}
_encoder = msgspec.json.Encoder(decimal_format="number")


def stats_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="frugal-proxy stats",
        description="The month's receipt from the usage ledger: calls, spend, what the premium route would cost.",
    )
    parser.add_argument("--month", type=_month, metavar="YYYY-MM", help="a UTC month (default: this one)")
    parser.add_argument(
        "--dir",
        type=Path,
        metavar="FOLDER",
        help="the usage folder to read: a volume the replicas share, or their files collected "
        "(default: $FRUGAL_HOME/usage)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON, for scripts")
    options = parser.parse_args(argv)
    logs.configure("warning")
    if options.dir is not None and not options.dir.is_dir():
        print(
            f"frugal-proxy stats: --dir {options.dir} is not a folder: "
            "name the folder that holds the YYYY-MM.*.jsonl files",
            file=sys.stderr,
        )
        return 2
    month = options.month or utc_month(time.time())
    figures = tally_month(month, options.dir)
    if options.json:
        sys.stdout.write(_encoder.encode(as_json(figures)).decode() + "\n")
    else:
        Console(highlight=False, soft_wrap=True).print(render(figures))
    return 0


def _month(text: str) -> str:
    try:
        datetime.datetime.strptime(text, "%Y-%m")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a month; write it as YYYY-MM, e.g. 2026-07") from None
    return text


def title(month: str) -> str:
    year, number = month.split("-")
    return f"{calendar.month_name[int(number)]} {year}"


def tool_name(tool: str) -> str:
    """`search` for frugal__search: the routed tools by their capability, others as exposed."""
    return tool.removeprefix(ROUTED_PREFIX) if tool.startswith(ROUTED_PREFIX) else tool


def provider_name(row: Row) -> str:
    if row.provider is not None:
        return row.provider
    return "(cache)" if row.outcome == "cached" else "—"


def note(outcome: str) -> str:
    if outcome == "ok":
        return ""
    return _NOTES.get(outcome, f"failed: {outcome}")


def row_note(row: Row) -> str:
    """A row's outcome note, and what of its paid amount may have been billed."""
    said = note(row.outcome)
    if not row.maybe_billed:
        return said
    maybe = f"{money.format_usd(row.maybe_billed)} may have been billed†"
    return f"{said}; {maybe}" if said else maybe


def render(figures: MonthTally) -> Text:
    """The receipt as the terminal shows it."""
    out = Text()
    out.append(f"frugal receipt · {title(figures.month)} (UTC)\n", style="bold")
    if not figures.calls:
        out.append(f"no calls recorded in {title(figures.month)}", style="dim")
        out.append(f" (nothing in {reader.folder(figures.folder)})" if not figures.files else "")
        if not ledger.enabled():
            out.append(f"\n{ledger.STATS_ENV}=off: this machine records no calls", style="yellow")
        return out
    rows = [
        (tool_name(r.tool), provider_name(r), f"{r.calls:,}", money.format_usd(r.paid), row_note(r))
        for r in figures.rows
    ]
    total = ("total", "", f"{figures.calls:,}", money.format_usd(figures.paid), "")
    widths = [
        max(len(header), *(len(row[i]) for row in [*rows, total]))
        for i, header in enumerate(("tool", "provider", "calls", "paid"))
    ]
    widths[0], widths[1] = max(widths[0], 8), max(widths[1], 18)
    widths[2], widths[3] = max(widths[2], 5), max(widths[3], 10)
    out.append(_line(("tool", "provider", "calls", "paid"), widths) + "\n", style="bold")
    for row in rows:
        out.append(_line(row[:4], widths), style="" if not row[4] else "dim")
        out.append(f"  {row[4]}\n" if row[4] else "\n", style="yellow" if row[4] else "")
    out.append(_line(total[:4], widths) + "\n", style="bold")
    label = widths[0] + widths[1] + widths[2] + 4
    saved = money.format_usd(abs(figures.saved))
    percent = figures.saved_percent
    out.append(f"{'same calls at premium rack rate*':<{label}}  {money.format_usd(figures.rack):>{widths[3]}}\n")
    out.append(f"{'you paid':<{label}}  {money.format_usd(figures.paid):>{widths[3]}}\n")
    if figures.maybe_billed:
        maybe = money.format_usd(figures.maybe_billed)
        out.append(f"{'  of which may have been billed†':<{label}}  {maybe:>{widths[3]}}\n", style="yellow")
    verb = "you saved" if figures.saved >= 0 else "you paid more by"
    out.append(f"{verb:<{label}}  ", style="bold")
    out.append(f"{saved:>{widths[3]}}", style="bold green" if figures.saved > 0 else "bold")
    out.append(f"   ({percent:.0f}%)\n" if percent is not None else "\n")
    tokens = f"{figures.tokens_kept_out:,}"
    out.append(f"{'context kept out of the model':<{label}}  {tokens:>{widths[3]}} tokens")
    out.append(" (cut by the governor, fetchable while spilled)\n", style="dim")
    out.append(FOOTNOTE + "\n", style="dim")
    if figures.maybe_billed:
        out.append(MAYBE_FOOTNOTE + "\n", style="dim")
    out.append(read_from(figures) + "\n", style="dim")
    if figures.skipped_lines:
        out.append(f"{figures.skipped_lines} unreadable ledger line(s) skipped\n", style="yellow")
    out.append("\n")
    out.append_text(day_bars(figures))
    return out


def read_from(figures: MonthTally) -> str:
    """How many replicas' ledgers the receipt read: `read 3 replicas' ledgers: a, b, c`, and a
    month's one file from before replica ids named as such."""
    named = [replica for replica in figures.replicas if replica]
    parts = []
    if named:
        whose = "1 replica's ledger" if len(named) == 1 else f"{len(named)} replicas' ledgers"
        parts.append(f"read {whose}: {', '.join(named)}")
    if "" in figures.replicas:
        single = f"{figures.month}.jsonl (written before replica ids)"
        parts.append(f"and {single}" if named else f"read 1 ledger file: {single}")
    return ", ".join(parts)


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    tool, provider, calls, paid = cells
    return f"{tool:<{widths[0]}}  {provider:<{widths[1]}}  {calls:>{widths[2]}}  {paid:>{widths[3]}}"


def day_bars(figures: MonthTally) -> Text:
    """Each UTC day from the 1st to the last day with calls: a bar of what was paid (█) and what
    was saved (░), scaled to the busiest day's premium-rate figure, and the two amounts."""
    out = Text()
    out.append("per day (UTC)  ", style="bold")
    out.append("█", style="yellow")
    out.append(" paid  ")
    out.append("░", style="green")
    out.append(" saved\n")
    known = {day.day: day for day in figures.days}
    scale = max((max(day.rack, day.paid) for day in figures.days), default=0)
    first = datetime.date.fromisoformat(f"{figures.month}-01")
    last = datetime.date.fromisoformat(figures.days[-1].day)
    moment = first
    while moment <= last:
        day = known.get(moment.isoformat())
        out.append(f"{moment:%m-%d}  ")
        if day is None:
            out.append(" " * BAR_WIDTH + "  —\n", style="dim")
        else:
            paid = _cells(day.paid, scale)
            saved = max(0, _cells(day.paid + max(day.saved, 0), scale) - paid)
            out.append("█" * paid, style="yellow")
            out.append("░" * saved, style="green")
            out.append(" " * (BAR_WIDTH - paid - saved))
            out.append(f"  {day.calls:>5,} calls  paid {money.format_usd(day.paid)}")
            sign = "" if day.saved >= 0 else "-"
            out.append(f"  saved {sign}{money.format_usd(abs(day.saved))}\n")
        moment += datetime.timedelta(days=1)
    return out


def _cells(micros: int, scale: int) -> int:
    if scale <= 0 or micros <= 0:
        return 0
    return max(1, round(BAR_WIDTH * micros / scale))


def as_json(figures: MonthTally) -> dict[str, Any]:
    """The same figures for scripts: amounts in USD as exact decimal numbers."""

    def usd(micros: int) -> Decimal:
        return money.usd(micros).normalize() if micros else Decimal(0)

    percent = figures.saved_percent
    return {
        "month": figures.month,
        "calls": figures.calls,
        "failed_calls": figures.failed,
        "paid_usd": usd(figures.paid),
        "maybe_billed_usd": usd(figures.maybe_billed),
        "rack_usd": usd(figures.rack),
        "saved_usd": usd(figures.saved),
        "saved_percent": None if percent is None else round(percent, 2),
        "tokens_kept_out": figures.tokens_kept_out,
        "rows": [
            {
                "tool": row.tool,
                "provider": row.provider,
                "outcome": row.outcome,
                "credited": row.outcome in CREDITED,
                "calls": row.calls,
                "paid_usd": usd(row.paid),
                "maybe_billed_usd": usd(row.maybe_billed),
            }
            for row in figures.rows
        ],
        "days": [
            {
                "day": d.day,
                "calls": d.calls,
                "paid_usd": usd(d.paid),
                "rack_usd": usd(d.rack),
                "saved_usd": usd(d.saved),
            }
            for d in figures.days
        ],
        "skipped_lines": figures.skipped_lines,
        "ledger": str(reader.folder(figures.folder)),
        "replicas": [replica for replica in figures.replicas if replica],
        "files": [str(path) for path in figures.files],
        "recording": ledger.enabled(),
    }
