"""The plain-text table of figures, each with its ratio to direct, and the issue's targets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from measure import MB, ColumnFigures, PayloadFigures, brief

P50_LIMIT_RATIO = 1.5
THROUGHPUT_OF_DIRECT = 0.40
THROUGHPUT_OVER_FASTMCP = 20.0
RSS_BASE_MB = 60.0
RSS_PER_PAYLOAD = 4.0
STARTUP_EXTRA_MS = 300.0


class Target(msgspec.Struct):
    """One target from the issue, judged on the frugal-proxy column."""

    name: str
    status: Literal["met", "missed", "n/a"]
    detail: str


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _payload(figures: ColumnFigures, size: int) -> PayloadFigures | None:
    return next((p for p in figures.payloads if p.size == size), None)


def _largest(figures: dict[str, ColumnFigures]) -> int | None:
    sizes = [p.size for f in figures.values() for p in f.payloads]
    return max(sizes) if sizes else None


Getter = Callable[[ColumnFigures], float | None]


def _rows(figures: dict[str, ColumnFigures], in_flight: int) -> list[tuple[str, str, Getter]]:
    """(label, phase whose error explains a gap, getter) for each row of figures."""
    rows: list[tuple[str, str, Getter]] = [
        ("start-up to first tools/list (ms)", "startup", lambda f: f.startup_ms),
        ("tools/call p50 (ms)", "latency", lambda f: f.latency_p50_ms),
        ("tools/call p90 (ms)", "latency", lambda f: f.latency_p90_ms),
        ("tools/call p99 (ms)", "latency", lambda f: f.latency_p99_ms),
        (f"throughput, {in_flight} in flight (calls/s)", "throughput", lambda f: f.throughput_per_s),
    ]
    sizes = sorted({p.size for f in figures.values() for p in f.payloads})
    for size in sizes:

        def wall(f: ColumnFigures, size: int = size) -> float | None:
            payload = _payload(f, size)
            return payload.ms_per_call if payload else None

        rows.append((f"{size // MB} MB result, wall per call (ms)", "payload", wall))
    if sizes:
        largest = sizes[-1]
        rows.append((f"peak RSS during {largest // MB} MB calls (MB)", "payload", lambda f: f.peak_rss_mb))
    return rows


def _cell(figures: ColumnFigures, direct: ColumnFigures, phase: str, get: Getter, ratio: bool) -> str:
    value = get(figures)
    if value is None:
        if "unavailable" in figures.errors:
            return "unavailable"
        if any(key.startswith(phase) for key in figures.errors):
            return "failed"
        return "skipped" if figures.errors else "-"
    text = _number(value)
    base = get(direct)
    if ratio and base:
        text += f" ({value / base:.2f}x)"
    return text


def table(figures: dict[str, ColumnFigures], in_flight: int) -> str:
    """The figures as a plain-text table, one column per way of reaching the upstream."""
    keys = list(figures)
    direct = figures["direct"]
    header = ["figure", *(figures[k].column for k in keys)]
    lines = [header]
    for label, phase, get in _rows(figures, in_flight):
        lines.append([label, *(_cell(figures[k], direct, phase, get, k != "direct") for k in keys)])
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
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in lines]
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in rendered)


def _judge(name: str, value: float | None, limit: float | None, ok: bool, detail: str) -> Target:
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
        f"{_number(value)} ms vs limit {_number(limit)} ms ({value / base:.2f}x direct)"
        if value is not None and limit is not None and base
        else _missing(frugal, direct)
    )
    found.append(_judge("p50 <= 1.5x direct p50", value, limit, _le(value, limit), detail))

    base, value = direct.throughput_per_s, frugal.throughput_per_s
    limit = base * THROUGHPUT_OF_DIRECT if base is not None else None
    detail = (
        f"{_number(value)}/s = {value / base:.0%} of direct {_number(base)}/s"
        if value is not None and base
        else _missing(frugal, direct)
    )
    found.append(_judge("throughput >= 40% of direct", value, limit, _ge(value, limit), detail))

    other = fastmcp.throughput_per_s if fastmcp is not None else None
    limit = other * THROUGHPUT_OVER_FASTMCP if other is not None else None
    if value is not None and other:
        detail = f"{_number(value)}/s = {value / other:.1f}x FastMCP proxy {_number(other)}/s"
    else:
        detail = _missing(frugal, fastmcp) if fastmcp is not None else "no FastMCP column"
    found.append(_judge("throughput >= 20x FastMCP proxy", value, limit, _ge(value, limit), detail))

    found.append(_rss_target(figures))

    base, value = direct.startup_ms, frugal.startup_ms
    limit = base + STARTUP_EXTRA_MS if base is not None else None
    detail = (
        f"{_number(value)} ms = direct {_number(base)} ms {value - base:+,.0f} ms"
        if value is not None and base is not None
        else _missing(frugal, direct)
    )
    found.append(_judge("start-up <= direct + 300 ms", value, limit, _le(value, limit), detail))
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
        return Target(name, "n/a", _missing(frugal, None))
    rss = frugal.peak_rss_mb
    if rss is None:
        return Target(name, "n/a", "passed, but the proxy's VmHWM could not be read")
    altered = payload.text_bytes != payload.expected_text_bytes
    detail = f"peak {rss:.1f} MB, {_number(payload.ms_per_call)} ms per call"
    if altered:
        detail += f"; result altered ({payload.text_bytes:,} of {payload.expected_text_bytes:,} bytes)"
    if frugal.rss_note:
        detail += f"; {frugal.rss_note}"
    return Target(name, "met" if rss <= limit else "missed", detail)


def _le(value: float | None, limit: float | None) -> bool:
    return value is not None and limit is not None and value <= limit


def _ge(value: float | None, limit: float | None) -> bool:
    return value is not None and limit is not None and value >= limit


def _missing(figures: ColumnFigures, other: ColumnFigures | None) -> str:
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


def errors_text(figures: dict[str, ColumnFigures]) -> str:
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
