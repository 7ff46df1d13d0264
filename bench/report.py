"""The plain-text table of figures, each with its ratio to direct, and the issue's targets."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

import msgspec

from measure import MB, ColumnFigures, PayloadFigures, brief

P50_LIMIT_RATIO = 1.5
THROUGHPUT_OF_DIRECT = 0.40
THROUGHPUT_OVER_FASTMCP = 20.0
RSS_BASE_MB = 60.0
RSS_PER_PAYLOAD = 4.0
STARTUP_EXTRA_MS = 300.0


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """`--json FILE` and `--frugal-arg ARG`, the options every bench entry point takes."""
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument(
        "--frugal-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="pass ARG to frugal-proxy before its `--` (repeatable), e.g. --frugal-arg=--no-govern",
    )


class Figures(Protocol):
    """What the table needs of one column's figures: its heading and the errors by phase."""

    @property
    def column(self) -> str: ...

    @property
    def errors(self) -> dict[str, str]: ...


F = TypeVar("F", bound=Figures)


class Row(NamedTuple, Generic[F]):
    """One row of figures: its label, the phase whose error explains a gap, and how to read it."""

    label: str
    phase: str
    get: Callable[[F], float | None]
    ratio: bool = True  # show each figure's ratio to its column's base


class RunInfo(msgspec.Struct):
    """When and where a run measured: the start of every `--json` report."""

    mode: str
    started_at: str
    python: str
    cpus: int
    load_at_start: float
    load_at_end: float


class Target(msgspec.Struct):
    """One target from the issue, judged on the frugal-proxy column."""

    name: str
    status: Literal["met", "missed", "n/a"]
    detail: str


def number(value: float) -> str:
    """A figure with as many digits as it deserves (a difference may be negative)."""
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _payload(figures: ColumnFigures, size: int) -> PayloadFigures | None:
    return next((p for p in figures.payloads if p.size == size), None)


def _largest(figures: dict[str, ColumnFigures]) -> int | None:
    sizes = [p.size for f in figures.values() for p in f.payloads]
    return max(sizes) if sizes else None


def _rows(figures: dict[str, ColumnFigures], in_flight: int) -> list[Row[ColumnFigures]]:
    rows: list[Row[ColumnFigures]] = [
        Row("start-up to first tools/list (ms)", "startup", lambda f: f.startup_ms),
        Row("tools/call p50 (ms)", "latency", lambda f: f.latency_p50_ms),
        Row("tools/call p90 (ms)", "latency", lambda f: f.latency_p90_ms),
        Row("tools/call p99 (ms)", "latency", lambda f: f.latency_p99_ms),
        Row(f"throughput, {in_flight} in flight (calls/s)", "throughput", lambda f: f.throughput_per_s),
    ]
    sizes = sorted({p.size for f in figures.values() for p in f.payloads})
    for size in sizes:

        def wall(f: ColumnFigures, size: int = size) -> float | None:
            payload = _payload(f, size)
            return payload.ms_per_call if payload else None

        rows.append(Row(f"{size // MB} MB result, wall per call (ms)", "payload", wall))
    if sizes:
        largest = sizes[-1]
        rows.append(Row(f"peak RSS during {largest // MB} MB calls (MB)", "payload", lambda f: f.peak_rss_mb))
    return rows


def _cell(figures: F, base: F | None, row: Row[F]) -> str:
    value = row.get(figures)
    if value is None:
        if "unavailable" in figures.errors:
            return "unavailable"
        if any(key.startswith(row.phase) for key in figures.errors):
            return "failed"
        return "skipped" if figures.errors else "-"
    text = number(value)
    against = row.get(base) if row.ratio and base is not None and base is not figures else None
    if against:
        text += f" ({value / against:.2f}x)"
    return text


def grid(figures: Mapping[str, F], rows: Sequence[Row[F]], bases: Mapping[str, str]) -> list[list[str]]:
    """The header and one line per row; a figure's ratio is to the column `bases` names for it."""
    keys = list(figures)
    lines = [["figure", *(figures[k].column for k in keys)]]
    for row in rows:
        cells = [_cell(figures[k], figures.get(bases.get(k, "")), row) for k in keys]
        lines.append([row.label, *cells])
    return lines


def layout(lines: list[list[str]]) -> str:
    """Lines of cells as aligned plain text, a rule under the header."""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in lines]
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in rendered)


def table(figures: dict[str, ColumnFigures], in_flight: int) -> str:
    """The figures as a plain-text table, one column per way of reaching the upstream."""
    keys = list(figures)
    lines = grid(figures, _rows(figures, in_flight), {k: "direct" for k in keys})
    largest = _largest(figures)
    if largest is not None:
        returned = [f"{largest // MB} MB result text returned (bytes)"]
        for key in keys:
            payload = _payload(figures[key], largest)
            if payload is None or payload.text_bytes is None:
                returned.append("-")
            elif payload.text_bytes == payload.expected_text_bytes:
                returned.append(f"{payload.text_bytes:,} (intact)")
            else:
                returned.append(f"{payload.text_bytes:,} (altered)")
        lines.append(returned)
        lines.append(["  RSS measured on", *(figures[k].rss_of or "-" for k in keys)])
    return layout(lines)


def judge(name: str, value: float | None, limit: float | None, ok: bool, detail: str) -> Target:
    """A target from its figure and limit: n/a when either is missing."""
    if value is None or limit is None:
        return Target(name, "n/a", detail)
    return Target(name, "met" if ok else "missed", detail)


def targets(figures: dict[str, ColumnFigures]) -> list[Target]:
    """The issue's targets for frugal-proxy, each judged met, missed, or n/a with the reason."""
    direct, frugal = figures["direct"], figures["frugal"]
    fastmcp = figures.get("fastmcp")
    found: list[Target] = []

    base, value = direct.latency_p50_ms, frugal.latency_p50_ms
    limit = base * P50_LIMIT_RATIO if base is not None else None
    detail = (
        f"{number(value)} ms vs limit {number(limit)} ms ({value / base:.2f}x direct)"
        if value is not None and limit is not None and base
        else missing(frugal, direct)
    )
    found.append(judge("p50 <= 1.5x direct p50", value, limit, at_most(value, limit), detail))

    base, value = direct.throughput_per_s, frugal.throughput_per_s
    limit = base * THROUGHPUT_OF_DIRECT if base is not None else None
    detail = (
        f"{number(value)}/s = {value / base:.0%} of direct {number(base)}/s"
        if value is not None and base
        else missing(frugal, direct)
    )
    found.append(judge("throughput >= 40% of direct", value, limit, at_least(value, limit), detail))

    other = fastmcp.throughput_per_s if fastmcp is not None else None
    limit = other * THROUGHPUT_OVER_FASTMCP if other is not None else None
    if value is not None and other:
        detail = f"{number(value)}/s = {value / other:.1f}x FastMCP proxy {number(other)}/s"
    else:
        detail = missing(frugal, fastmcp) if fastmcp is not None else "no FastMCP column"
    found.append(judge("throughput >= 20x FastMCP proxy", value, limit, at_least(value, limit), detail))

    found.append(_rss_target(figures))

    base, value = direct.startup_ms, frugal.startup_ms
    limit = base + STARTUP_EXTRA_MS if base is not None else None
    detail = (
        f"{number(value)} ms = direct {number(base)} ms {value - base:+,.0f} ms"
        if value is not None and base is not None
        else missing(frugal, direct)
    )
    found.append(judge("start-up <= direct + 300 ms", value, limit, at_most(value, limit), detail))
    return found


def _rss_target(figures: dict[str, ColumnFigures]) -> Target:
    frugal = figures["frugal"]
    largest = _largest(figures)
    size_mb = (largest or 10 * MB) / MB
    limit = RSS_BASE_MB + RSS_PER_PAYLOAD * size_mb
    name = f"{size_mb:.0f} MB result passes, proxy peak RSS <= 60 MB + 4x payload ({limit:.0f} MB)"
    payload = _payload(frugal, largest) if largest is not None else None
    if payload is None or payload.ms_per_call is None:
        failed = frugal.errors.get(f"payload {size_mb:.0f} MB")
        if failed is not None:
            return Target(name, "missed", f"the call failed: {brief(failed)}")
        return Target(name, "n/a", missing(frugal, None))
    rss = frugal.peak_rss_mb
    if rss is None:
        return Target(name, "n/a", "passed, but the proxy's VmHWM could not be read")
    altered = payload.text_bytes != payload.expected_text_bytes
    detail = f"peak {rss:.1f} MB, {number(payload.ms_per_call)} ms per call"
    if altered:
        detail += f"; result altered ({payload.text_bytes:,} of {payload.expected_text_bytes:,} bytes)"
    if frugal.rss_note:
        detail += f"; {frugal.rss_note}"
    return Target(name, "met" if rss <= limit else "missed", detail)


def at_most(value: float | None, limit: float | None) -> bool:
    """Both known and value <= limit."""
    return value is not None and limit is not None and value <= limit


def at_least(value: float | None, limit: float | None) -> bool:
    """Both known and value >= limit."""
    return value is not None and limit is not None and value >= limit


def missing(figures: Figures, other: Figures | None) -> str:
    """Why a target has no figure: the first error of either column."""
    for subject in (figures, other):
        if subject is not None and subject.errors:
            phase, message = next(iter(subject.errors.items()))
            return f"{subject.column} has no figure ({phase}: {brief(message)})"
    return "no figure"


def targets_text(found: Sequence[Target]) -> str:
    """The targets as lines: status, name, detail."""
    marks = {"met": "[MET]   ", "missed": "[MISSED]", "n/a": "[n/a]   "}
    width = max(len(t.name) for t in found)
    return "\n".join(f"  {marks[t.status]} {t.name.ljust(width)}  {t.detail}" for t in found)


def errors_text(figures: Mapping[str, Figures]) -> str:
    """Every recorded error, one per line, or the empty string."""
    lines = []
    for f in figures.values():
        seen: dict[str, str] = {}
        for phase, message in f.errors.items():
            if message in seen:
                lines.append(f"  {f.column} / {phase}: the same error as {seen[message]}")
                continue
            seen[message] = phase
            lines.append(f"  {f.column} / {phase}: " + message.replace("\n", "\n      "))
    return "\n".join(lines)
