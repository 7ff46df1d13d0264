"""Benchmark: direct stdio vs frugal-proxy vs FastMCP's proxy, in one process, interleaved.

    .venv/bin/python bench/run.py [--quick] [--upstream notes|everything|all] [--json out.json]
                                  [--everything PATH/TO/server-everything/dist/index.js]
                                  [--frugal-arg=--no-govern ...]

See bench/README.md for what each figure means. Traffic goes only to child processes over pipes.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

import anyio
import msgspec

from columns import Column, Upstream, columns, everything_upstream, notes_upstream
from measure import Bench, ColumnFigures, Plan, log
from report import RunInfo, Target, add_output_options, errors_text, table, targets, targets_text


class UpstreamReport(msgspec.Struct):
    """The figures and targets for one upstream."""

    upstream: str
    command: list[str]
    unavailable: str | None = None
    figures: dict[str, ColumnFigures] = msgspec.field(default_factory=dict)
    targets: list[Target] = msgspec.field(default_factory=list)


class Report(RunInfo):
    """Everything one run measured; what `--json` writes."""

    plan: Plan
    fastmcp_version: str | None
    frugal_args: list[str]
    columns_unavailable: dict[str, str]
    upstreams: list[UpstreamReport]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 calls, 2 s bursts")
    parser.add_argument("--upstream", choices=["notes", "everything", "all"], default="all")
    parser.add_argument("--everything", type=Path, default=None, help="server-everything's dist/index.js")
    add_output_options(parser)
    return parser.parse_args(argv)


def _upstreams(choice: str, everything: Path | None) -> list[Upstream]:
    chosen = []
    if choice in ("notes", "all"):
        chosen.append(notes_upstream())
    if choice in ("everything", "all"):
        chosen.append(everything_upstream(everything))
    return chosen


def _print_column_status(found: list[Column]) -> None:
    for column in found:
        if column.unavailable is not None:
            print(f"{column.label} column: UNAVAILABLE - {column.unavailable}")
            print("  (the other columns still run)")
        elif column.version is not None:
            print(f"{column.label} column: fastmcp {column.version} in .bench-venv")


async def _bench_upstream(upstream: Upstream, found: list[Column], plan: Plan) -> UpstreamReport:
    report = UpstreamReport(upstream=upstream.name, command=upstream.command)
    title = f"== upstream {upstream.name}: {' '.join(upstream.command)} =="
    print(f"\n{title}", flush=True)
    if upstream.unavailable is not None:
        report.unavailable = upstream.unavailable
        print(f"SKIPPED - {upstream.unavailable}")
        return report
    report.figures = await Bench(upstream, found, plan).run()
    report.targets = targets(report.figures)
    print()
    print(table(report.figures, plan.in_flight))
    print("\ntargets (frugal-proxy):")
    print(targets_text(report.targets))
    errors = errors_text(report.figures)
    if errors:
        print("\nerrors:")
        print(errors)
    return report


async def main(argv: list[str]) -> int:
    """Run the chosen upstreams and print (and optionally write) the figures."""
    args = _parse(argv)
    plan = Plan.quick() if args.quick else Plan.full()
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    log(f"bench: {'quick' if args.quick else 'full'} run, probing columns")
    found = await columns(args.frugal_arg)
    print(f"frugal-proxy bench ({'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs, {started})")
    load = os.getloadavg()[0]
    busy = "  (busy: other processes share the CPUs, so the figures are noisy)" if load > 0.5 else ""
    print(f"load average (1 min) at start: {load:.2f}{busy}")
    frugal = next(c for c in found if c.key == "frugal")
    print(f"frugal-proxy column: .venv/bin/python {' '.join(frugal.prefix[1:])} -- <upstream>")
    _print_column_status(found)
    reports = [await _bench_upstream(u, found, plan) for u in _upstreams(args.upstream, args.everything)]
    report = Report(
        mode="quick" if args.quick else "full",
        started_at=started,
        python=platform.python_version(),
        cpus=os.cpu_count() or 0,
        load_at_start=load,
        load_at_end=os.getloadavg()[0],
        plan=plan,
        fastmcp_version=next((c.version for c in found if c.key == "fastmcp"), None),
        frugal_args=args.frugal_arg,
        columns_unavailable={c.key: c.unavailable for c in found if c.unavailable is not None},
        upstreams=reports,
    )
    if args.json is not None:
        await anyio.Path(args.json).write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
