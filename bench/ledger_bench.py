"""What the usage ledger costs, and how fast `stats` reads a large month.

    writer     lines/s sustained into one month's file (append N lines, flush), and the caller's
               cost of one `append` (what the event loop pays)
    policy     CPU per call of the seal hook: the line built from a finished exchange, queued
    stdio      p50 / p90 of a small tools/call through the wrap form, FRUGAL_STATS=off against on,
               in interleaved rounds (`add(2, 3)` on examples/servers/notes_server.py)
    stats      `tally_month` and the whole `frugal-proxy stats` command over a 1,000,000-line month

    .venv/bin/python bench/ledger_bench.py [--quick]

Targets (issue 13): no measurable change in the stdio p50; at least 20,000 lines/s sustained;
`stats` over a 1,000,000-line month under 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frugal_proxy.ledger.line import UsageLine, encode
from frugal_proxy.ledger.tally import tally_month
from frugal_proxy.ledger.writer import LedgerWriter
from frugal_proxy.policies.ledger import usage_line
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Attempt, Call, Decision, Exchange, Receipt, Route

from rpc_client import connect

ROOT = Path(__file__).resolve().parent.parent
NOTES = ROOT / "examples" / "servers" / "notes_server.py"
PROVIDERS = ["marginalia", "wikipedia", "serper", "brave", "youcom", "searxng", "jina", "firecrawl"]


def line(n: int, day: int = 14) -> UsageLine:
    provider = PROVIDERS[n % len(PROVIDERS)]
    paid = 0.001 if provider in ("serper", "firecrawl") else 0.0
    return UsageLine(
        ts=f"2026-07-{day:02d}T{n % 24:02d}:{n % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z",
        tool="frugal__search" if n % 3 else "files__read_file",
        capability="search" if n % 3 else None,
        provider=provider,
        outcome="ok" if n % 17 else "rate_limited",
        cost_usd=paid,
        total_cost_usd=paid,
        rack_usd=0.005,
        rack_provider="brave",
        latency_ms=123.456,
        cached=n % 11 == 0,
        bytes_total=40_000,
        bytes_returned=32_000,
        tokens_total=10_000,
        tokens_returned=8_000,
        attempts=1,
        operator="local",
        billed={provider: paid} if paid else {},
        served_ms={provider: 120.5},
    )


def bench_writer(count: int) -> None:
    lines = [line(n) for n in range(count)]
    with tempfile.TemporaryDirectory() as folder:
        writer = LedgerWriter(Path(folder))
        started = time.perf_counter()
        for item in lines:
            writer.append(item)
        queued = time.perf_counter() - started
        assert writer.flush(timeout=120)
        elapsed = time.perf_counter() - started
        size = (Path(folder) / "2026-07.jsonl").stat().st_size
    print(f"writer: {count:,} lines in {elapsed:.3f} s = {count / elapsed:,.0f} lines/s sustained (target >= 20,000)")
    print(f"  append (the caller's cost): {queued / count * 1e6:.2f} us/line; {size / count:.0f} bytes/line")


def bench_policy(count: int) -> None:
    route = Route("frugal__search", ("serper",), capability="search")
    exchange = Exchange(Call(1, "frugal__search", {}), route)
    exchange.attempts = [Attempt("serper", "ok", 120.5, 1_000)]
    exchange.receipt = Receipt("serper", 1_000, tuple(exchange.attempts), 1_000, "")
    exchange.answer = jsonrpc.result(1, {"content": [{"type": "text", "text": "x" * 2000}]})
    exchange.trace = [Decision("route", "cheap", "ordered", "effective cost ascending")]
    rack = {"search": ("brave", 5_000)}
    sink: list[UsageLine] = []
    started = time.process_time()
    for _ in range(count):
        sink.append(usage_line(exchange, rack, 1_784_021_401.0))
    built = time.process_time() - started
    encoded = time.process_time()
    for item in sink[:count]:
        encode(item)
    encoding = time.process_time() - encoded
    print(f"policy: {built / count * 1e6:.2f} us CPU per call to build the line (on the loop)")
    print(f"  encoding it: {encoding / count * 1e6:.2f} us per line (in the writer thread)")


async def _p50(stats: str, calls: int) -> list[float]:
    os.environ["FRUGAL_STATS"] = stats
    samples: list[float] = []
    command = [sys.executable, "-m", "frugal_proxy", "--", sys.executable, str(NOTES)]
    async with connect(command, cwd=ROOT) as client:
        await client.handshake()
        params = b'{"name":"add","arguments":{"a":2,"b":3}}'
        for _ in range(20):
            await client.call_tool(params)  # warm-up
        for _ in range(calls):
            started = time.perf_counter()
            await client.call_tool(params)
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def bench_stdio(rounds: int, calls: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        os.environ["FRUGAL_HOME"] = folder
        found: dict[str, list[float]] = {"off": [], "on": []}
        for turn in range(rounds):
            for stats in ("off", "on") if turn % 2 == 0 else ("on", "off"):
                found[stats].extend(asyncio.run(_p50(stats, calls)))
        written = sum(1 for _ in (Path(folder) / "usage").glob("*.jsonl"))
    os.environ.pop("FRUGAL_STATS", None)
    print(f"stdio add(2, 3) through the wrap form, {rounds} rounds x {calls} calls, interleaved:")
    for stats, samples in found.items():
        ordered = sorted(samples)
        p50, p90 = statistics.median(ordered), ordered[int(len(ordered) * 0.9)]
        print(f"  FRUGAL_STATS={stats:3}  p50 {p50:.3f} ms  p90 {p90:.3f} ms")
    delta = statistics.median(found["on"]) - statistics.median(found["off"])
    print(f"  p50 difference (on - off): {delta * 1000:+.0f} us; ledger files written: {written}")


def bench_stats(count: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        usage = Path(folder) / "usage"
        usage.mkdir()
        with (usage / "2026-07.jsonl").open("wb") as handle:
            block = [encode(line(n, 1 + n % 31)) for n in range(10_000)]
            for _ in range(count // len(block)):
                handle.write(b"".join(block))
        size = (usage / "2026-07.jsonl").stat().st_size
        os.environ["FRUGAL_HOME"] = folder
        started = time.perf_counter()
        month = tally_month("2026-07")
        tallied = time.perf_counter() - started
        assert month.calls == count
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "frugal_proxy", "stats", "--month", "2026-07"], check=True, capture_output=True
        )
        command = time.perf_counter() - started
    print(f"stats over {count:,} lines ({size / 1e6:.0f} MB): tally {tallied:.2f} s; the whole command {command:.2f} s")
    print("  target: under 3 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer lines and calls")
    quick = parser.parse_args().quick
    bench_writer(50_000 if quick else 200_000)
    bench_policy(20_000 if quick else 100_000)
    bench_stdio(2 if quick else 6, 100 if quick else 300)
    bench_stats(100_000 if quick else 1_000_000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
