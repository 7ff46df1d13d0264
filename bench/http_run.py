"""HTTP benchmark: the notes server served by the SDK directly vs frugal-proxy vs mcp-proxy.

    .venv/bin/python bench/http_run.py [--quick] [--json out.json] [--only KEY,KEY]
                                       [--frugal-arg=--no-govern ...]

Each column is a server process on 127.0.0.1 and the era its client speaks (http_columns.py);
every phase visits the columns in interleaved rounds, as run.py does over stdio. See
bench/README.md for the figures and the targets. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import os
import platform
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import anyio
import msgspec

from columns import notes_upstream
from http_client import HttpClient, http_client
from http_columns import HttpColumn, Server, http_columns, probe_mcp_proxy, serve
from measure import MB, latency_rounds, log, status_kib, throughput_rounds
from report import (
    Row,
    RunInfo,
    Target,
    add_output_options,
    at_least,
    at_most,
    errors_text,
    grid,
    judge,
    layout,
    missing,
    number,
    targets_text,
)
from rpc_client import ClientError

# The targets of the performance issue ("Close to the floor"): frugal-proxy's added p50 at most a
# third of mcp-proxy's, its throughput at least three times mcp-proxy's, and the proxy process's
# own CPU at most 0.5 ms per call at the largest in-flight count.
ADDED_P50_OF_PEER = 1 / 3
THROUGHPUT_OVER_PEER = 3.0
CPU_US_PER_CALL = 500.0
PEERS = {"frugal-modern": "mcp-proxy-stateless", "frugal-session": "mcp-proxy-session"}
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_REPLY_TIMEOUT = 60.0


class HttpPlan(msgspec.Struct, frozen=True):
    """How much of each measurement to do."""

    warmup_calls: int
    latency_calls: int
    latency_rounds: int
    in_flight: list[int]
    throughput_seconds: float  # per column and in-flight level, split into the rounds
    throughput_rounds: int

    @classmethod
    def full(cls) -> HttpPlan:
        return cls(200, 2000, 10, [16, 64], 10.0, 5)

    @classmethod
    def quick(cls) -> HttpPlan:
        return cls(20, 200, 4, [16, 64], 2.0, 2)


class HttpFigures(msgspec.Struct):
    """Everything measured for one column."""

    column: str
    era: str
    command: list[str]
    latency_p50_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_calls: int = 0
    added_p50_ms: float | None = None  # over the direct column of the same era
    throughput_per_s: dict[int, float] = msgspec.field(default_factory=dict)  # by calls in flight
    throughput_calls: dict[int, int] = msgspec.field(default_factory=dict)
    server_cpu_us_per_call: dict[int, float] = msgspec.field(default_factory=dict)  # the proxy alone
    path_cpu_us_per_call: dict[int, float] = msgspec.field(default_factory=dict)  # with its upstreams
    client_cpu_us_per_call: dict[int, float] = msgspec.field(default_factory=dict)
    rss_mb: float | None = None
    peak_rss_mb: float | None = None
    rss_of: str = ""
    errors: dict[str, str] = msgspec.field(default_factory=dict)


class HttpReport(RunInfo):
    """Everything one run measured; what `--json` writes."""

    plan: HttpPlan
    mcp_proxy_version: str | None
    frugal_args: list[str]
    figures: dict[str, HttpFigures]
    targets: list[Target]


def _cpu_seconds(pid: int) -> tuple[float, float] | None:
    """User + system CPU seconds of the process `pid`, and of it with all its descendants (the
    proxy and its upstreams), from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    seconds: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        seconds[int(entry.name)] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    if pid not in seconds:
        return None
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += seconds.get(current, 0.0)
        todo += children.get(current, [])
    return seconds[pid], total


class HttpBench:
    """The measurements across the live columns, in interleaved rounds."""

    def __init__(self, columns: Sequence[HttpColumn], plan: HttpPlan) -> None:
        self.plan = plan
        self.upstream = notes_upstream()
        self.columns = {c.key: c for c in columns if c.unavailable is None}
        self.figures = {c.key: HttpFigures(column=c.label, era=c.era, command=c.command(0)) for c in columns}
        for column in columns:
            if column.unavailable is not None:
                self.figures[column.key].errors["unavailable"] = column.unavailable
        self.servers: dict[str, Server] = {}
        self._nonces = itertools.count(1)

    def _fail(self, key: str, exc: BaseException, phase: str) -> None:
        message = f"{type(exc).__name__}: {exc}"
        self.figures[key].errors[phase] = message
        log(f"  ! {self.columns[key].label} {phase}: {message[:300]}")

    def _small_call(self) -> bytes:
        return self.upstream.small_call(next(self._nonces))

    async def run(self) -> dict[str, HttpFigures]:
        """Start every server, open a client on each, measure; every server stopped on return."""
        async with contextlib.AsyncExitStack() as stack:
            clients: dict[str, HttpClient] = {}
            for key, column in self.columns.items():
                log(f"  starting {column.label}")
                try:
                    server = await stack.enter_async_context(serve(column))
                    self.servers[key] = server
                    client = await stack.enter_async_context(
                        http_client(server.port, column.era, reply_timeout=_REPLY_TIMEOUT)
                    )
                    await client.request("tools/list")
                    clients[key] = client
                except ClientError as exc:
                    tail = self.servers[key].log_tail() if key in self.servers else ""
                    self._fail(key, ClientError(f"{exc}; log: {tail}" if tail else str(exc)), "startup")
            await self._latency(clients)
            live = {k: c for k, c in clients.items() if "latency" not in self.figures[k].errors}
            for in_flight in self.plan.in_flight:
                live = await self._throughput(live, in_flight)
            for key, server in self.servers.items():
                figures = self.figures[key]
                rss, peak = status_kib(server.pid, "VmRSS"), status_kib(server.pid, "VmHWM")
                figures.rss_mb = rss * 1024 / MB if rss is not None else None
                figures.peak_rss_mb = peak * 1024 / MB if peak is not None else None
                figures.rss_of = "server process" if self.columns[key].kind == "direct" else "proxy process only"
        self._added_p50()
        return self.figures

    async def _latency(self, clients: dict[str, HttpClient]) -> None:
        fail = partial(self._fail, phase="latency")
        await latency_rounds(clients, self._small_call, self.plan, self.figures, fail)

    async def _throughput(self, clients: dict[str, HttpClient], in_flight: int) -> dict[str, HttpClient]:
        """One in-flight level; returns the clients still live."""
        cpu_before = {k: _cpu_seconds(self.servers[k].pid) for k in clients}
        fail = partial(self._fail, phase=f"throughput {in_flight}")
        totals = await throughput_rounds(clients, self._small_call, in_flight, self.plan, fail)
        for key, load in totals.items():
            if load.seconds <= 0 or load.calls == 0:
                continue
            figures = self.figures[key]
            figures.throughput_per_s[in_flight] = load.calls / load.seconds
            figures.throughput_calls[in_flight] = load.calls
            figures.client_cpu_us_per_call[in_flight] = load.client_cpu_seconds / load.calls * 1e6
            before, after = cpu_before[key], _cpu_seconds(self.servers[key].pid)
            if before is not None and after is not None:
                figures.server_cpu_us_per_call[in_flight] = (after[0] - before[0]) / load.calls * 1e6
                figures.path_cpu_us_per_call[in_flight] = (after[1] - before[1]) / load.calls * 1e6
        return {k: clients[k] for k in totals}

    def _added_p50(self) -> None:
        for key, column in self.columns.items():
            if column.kind == "direct":
                continue
            own, base = self.figures[key].latency_p50_ms, self.figures[column.base].latency_p50_ms
            if own is not None and base is not None:
                self.figures[key].added_p50_ms = own - base


def _throughput_at(in_flight: int) -> Callable[[HttpFigures], float | None]:
    return lambda f: f.throughput_per_s.get(in_flight)


def _rows(plan: HttpPlan) -> list[Row[HttpFigures]]:
    rows: list[Row[HttpFigures]] = [
        Row("tools/call p50 (ms)", "latency", lambda f: f.latency_p50_ms),
        Row("tools/call p90 (ms)", "latency", lambda f: f.latency_p90_ms),
        Row("tools/call p99 (ms)", "latency", lambda f: f.latency_p99_ms),
        Row("added p50 over direct, same era (ms)", "latency", lambda f: f.added_p50_ms, ratio=False),
    ]
    for n in plan.in_flight:
        rows.append(Row(f"throughput, {n} in flight (calls/s)", "throughput", _throughput_at(n)))
    last = plan.in_flight[-1]
    rows += [
        Row(
            f"server process CPU per call, {last} in flight (us)",
            "throughput",
            lambda f: f.server_cpu_us_per_call.get(last),
        ),
        Row(
            f"  with its upstream, {last} in flight (us)",
            "throughput",
            lambda f: f.path_cpu_us_per_call.get(last),
        ),
        Row(
            f"bench client CPU per call, {last} in flight (us)",
            "throughput",
            lambda f: f.client_cpu_us_per_call.get(last),
            ratio=False,
        ),
        Row("RSS after the run (MB)", "startup", lambda f: f.rss_mb),
        Row("peak RSS (MB)", "startup", lambda f: f.peak_rss_mb),
    ]
    return rows


def table(figures: dict[str, HttpFigures], columns: Sequence[HttpColumn], plan: HttpPlan) -> str:
    """The figures, each with its ratio to the direct column of the same era."""
    lines = grid(figures, _rows(plan), {c.key: c.base for c in columns})
    lines.insert(1, ["era the client speaks", *(f.era for f in figures.values())])
    lines.append(["  RSS measured on", *(f.rss_of or "-" for f in figures.values())])
    return layout(lines)


def targets(figures: dict[str, HttpFigures], plan: HttpPlan) -> list[Target]:
    """The issue's targets: frugal-proxy against mcp-proxy, era by era."""
    found: list[Target] = []
    for key, peer_key in PEERS.items():
        if key not in figures or peer_key not in figures:
            continue
        frugal, peer = figures[key], figures[peer_key]
        pair = f"{frugal.column} vs {peer.column}"
        value, other = frugal.added_p50_ms, peer.added_p50_ms
        limit = other * ADDED_P50_OF_PEER if other is not None else None
        if value is not None and other is not None:
            detail = f"{number(value)} ms vs limit {number(limit or 0)} ms (mcp-proxy adds {number(other)} ms)"
        else:
            detail = missing(frugal, peer)
        found.append(judge(f"{pair}: added p50 <= 1/3 of mcp-proxy's", value, limit, at_most(value, limit), detail))
        for n in plan.in_flight:
            value, other = frugal.throughput_per_s.get(n), peer.throughput_per_s.get(n)
            limit = other * THROUGHPUT_OVER_PEER if other is not None else None
            if value is not None and other:
                detail = f"{number(value)}/s = {value / other:.2f}x mcp-proxy {number(other)}/s"
            else:
                detail = missing(frugal, peer)
            label = f"{pair}: throughput {n} in flight >= {THROUGHPUT_OVER_PEER:g}x"
            found.append(judge(label, value, limit, at_least(value, limit), detail))
        last = max(plan.in_flight)
        cpu = frugal.server_cpu_us_per_call.get(last)
        detail = f"{number(cpu)} us per call" if cpu is not None else missing(frugal, None)
        label = f"{frugal.column}: proxy CPU per call, {last} in flight <= {CPU_US_PER_CALL:g} us"
        found.append(judge(label, cpu, CPU_US_PER_CALL, at_most(cpu, CPU_US_PER_CALL), detail))
    return found


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 200 calls, 2 s bursts")
    parser.add_argument(
        "--only",
        default=None,
        metavar="KEY,KEY",
        help="measure only these columns (and the direct column each is compared with), e.g. to re-run"
        " a disturbed one: direct-modern, direct-session, frugal-modern, frugal-session,"
        " mcp-proxy-stateless, mcp-proxy-session",
    )
    add_output_options(parser)
    return parser.parse_args(argv)


def _chosen(found: list[HttpColumn], only: str | None) -> list[HttpColumn]:
    if only is None:
        return found
    wanted = {key.strip() for key in only.split(",") if key.strip()}
    known = {c.key for c in found}
    unknown = wanted - known
    if unknown:
        raise SystemExit(f"http_run.py: --only: no column {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    bases = {c.base for c in found if c.key in wanted}
    return [c for c in found if c.key in wanted or c.key in bases]


async def main(argv: list[str]) -> int:
    """Measure the chosen columns and print (and optionally write) the figures."""
    args = _parse(argv)
    plan = HttpPlan.quick() if args.quick else HttpPlan.full()
    mode = "quick" if args.quick else "full"
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    version = await probe_mcp_proxy()
    found = _chosen(http_columns(notes_upstream(), args.frugal_arg, version), args.only)
    print(f"frugal-proxy HTTP bench ({mode} run, {os.cpu_count()} CPUs, {started})")
    load = os.getloadavg()[0]
    busy = "  (busy: other processes share the CPUs, so the figures are noisy)" if load > 0.5 else ""
    print(f"load average (1 min) at start: {load:.2f}{busy}")
    print(f"upstream: {' '.join(notes_upstream().command)} (small call: add(a, 3))")
    print(f"mcp-proxy: {version or 'UNAVAILABLE'}; frugal-proxy: --rate-limit lifted for the loopback load")
    for column in found:
        if column.unavailable is not None:
            print(f"{column.label} column: UNAVAILABLE - {column.unavailable} (the other columns still run)")
    figures = await HttpBench(found, plan).run()
    found_targets = targets(figures, plan)
    load_at_end = os.getloadavg()[0]
    print()
    print(table(figures, found, plan))
    print(f"\nload average (1 min) at end: {load_at_end:.2f}")
    print("\ntargets (frugal-proxy vs mcp-proxy):")
    print(
        targets_text(found_targets)
        if found_targets
        else "  none judged: a frugal column or its mcp-proxy peer was not run"
    )
    errors = errors_text(figures)
    if errors:
        print("\nerrors:")
        print(errors)
    if args.json is not None:
        report = HttpReport(
            mode=mode,
            started_at=started,
            python=platform.python_version(),
            cpus=os.cpu_count() or 0,
            load_at_start=load,
            load_at_end=load_at_end,
            plan=plan,
            mcp_proxy_version=version,
            frugal_args=args.frugal_arg,
            figures=figures,
            targets=found_targets,
        )
        await anyio.Path(args.json).write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
        print(f"\nfigures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
