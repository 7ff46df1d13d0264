"""Load and soak figures for frugal-proxy, over HTTP and over stdio.

    .venv/bin/python bench/load.py [--quick] [--phase mixed|crowd|stdio|all]

    mixed   50 HTTP clients for 60 s, half 2026-07-28 (stateless POSTs), half session-era (a
            session each, and so an upstream process each), each calling `echo` in a loop:
            errors, p50 / p99 latency, the proxy's RSS at the start and the end
    crowd   200 session-era HTTP clients for 30 s against `--max-sessions 100`: the status of
            every request; only 200, 202 and the documented 503 for the sessions over the cap
            are expected
    stdio   200,000 calls over stdio, 16 in flight, the proxy's RSS sampled every 10 s: the end
            should be within 10 % of the first minute's

The upstream is the faulty test server's `echo` (tests/servers/faulty_server.py, raw JSON-RPC in
one small Python process), so that 100 session-era upstream processes fit on a small machine.
`--quick` divides every duration and count by six. Results go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2

from http_client import Era, HttpClient, http_client
from http_columns import HttpColumn, serve
from measure import status_kib
from rpc_client import ClientError, connect

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
FAULTY = [PYTHON, str(ROOT / "tests" / "servers" / "faulty_server.py")]
ECHO = b'{"name":"echo","arguments":{"text":"load"}}'
NO_RATE_LIMIT = ["--rate-limit", "1000000/1000000"]  # every client is 127.0.0.1: one bucket
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def rss_mb(pid: int) -> float:
    return (status_kib(pid, "VmRSS") or 0) / 1024


def column(*options: str) -> HttpColumn:
    argv = [PYTHON, "-m", "frugal_proxy", "--http", "127.0.0.1:{port}", *NO_RATE_LIMIT, *options, "--", *FAULTY]
    return HttpColumn("frugal", "frugal-proxy", "frugal", "modern", "frugal", argv)


@dataclass
class MixedRun:
    """What a mixed-era run saw: each call's latency, the errors by kind, the proxy's RSS (MB)."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    start_rss: float = 0.0
    peak_rss: float = 0.0
    end_rss: float = 0.0


async def call_loop(client: HttpClient, until: float, latencies: list[float], errors: Counter[str]) -> None:
    """`echo` one call at a time until `until` (monotonic): each latency, or the error by kind."""
    while time.monotonic() < until:
        began = time.perf_counter()
        try:
            await client.call_tool(ECHO)
        except ClientError as exc:
            errors[f"{client.era}: {type(exc).__name__}: {str(exc)[:90]}"] += 1
            await anyio.sleep(0.05)  # a refused call (a 429) is not hammered again at once
            continue
        latencies.append(time.perf_counter() - began)


async def run_mixed(proxy: HttpColumn, clients: int, seconds: float) -> MixedRun:
    """Half 2026-07-28 (stateless POSTs), half session-era clients (a session each) of `proxy`,
    each calling `echo` in a loop for `seconds` once all have joined (or failed to)."""
    run = MixedRun()
    async with serve(proxy) as server:
        log(f"mixed: {clients} clients for {seconds:g} s")
        ready = anyio.Event()
        joined = [0]
        until = [0.0]

        def join() -> None:
            joined[0] += 1
            if joined[0] == clients:
                until[0] = time.monotonic() + seconds
                ready.set()

        async def one(index: int) -> None:
            era: Era = "modern" if index % 2 == 0 else "session"
            try:
                async with http_client(server.port, era, reply_timeout=30) as client:
                    join()
                    await ready.wait()
                    await call_loop(client, until[0], run.latencies, run.errors)
            except ClientError as exc:
                run.errors[f"{era} handshake: {type(exc).__name__}: {str(exc)[:90]}"] += 1
                if not ready.is_set():
                    join()

        with anyio.fail_after(seconds + 120):
            async with anyio.create_task_group() as tg:
                for index in range(clients):
                    tg.start_soon(one, index)
                await ready.wait()
                run.start_rss = run.peak_rss = rss_mb(server.pid)
                while time.monotonic() < until[0]:
                    await anyio.sleep(1)
                    run.peak_rss = max(run.peak_rss, rss_mb(server.pid))
        run.end_rss = rss_mb(server.pid)
    modern = clients - clients // 2
    print(f"mixed-era HTTP, {clients} clients ({modern} modern, {clients - modern} session), {seconds:g} s")
    calls, errors = len(run.latencies), sum(run.errors.values())
    share = 100 * errors / max(1, calls + errors)
    print(f"  calls ok {calls} ({calls / seconds:.0f}/s), errors {errors} ({share:.1f} %)")
    for kind, count in run.errors.most_common(5):
        print(f"    {count} x {kind}")
    print(f"  p50 {percentile(run.latencies, 0.5) * 1000:.1f} ms, p99 {percentile(run.latencies, 0.99) * 1000:.1f} ms")
    return run


async def mixed(clients: int, seconds: float) -> None:
    """Half modern, half session-era clients, each calling in a loop until the time is up."""
    run = await run_mixed(column(), clients, seconds)
    print(f"  proxy RSS start {run.start_rss:.1f} MB, end {run.end_rss:.1f} MB, peak sampled {run.peak_rss:.1f} MB")


async def crowd(clients: int, seconds: float, max_sessions: int) -> None:
    """More session-era clients than sessions allowed: every status each of them saw."""
    statuses: Counter[str] = Counter()
    refusals: list[str] = []
    async with serve(column("--max-sessions", str(max_sessions))) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        log(f"crowd: {clients} clients for {seconds:g} s, --max-sessions {max_sessions}")
        deadline = time.monotonic() + seconds

        async def one(http: httpx2.AsyncClient) -> None:
            try:
                opened = await http.post(url, json=INITIALIZE, headers=ACCEPT)
            except httpx2.HTTPError as exc:
                statuses[f"initialize: {type(exc).__name__}"] += 1
                return
            statuses[f"initialize: {opened.status_code}"] += 1
            if opened.status_code != 200 and opened.text not in refusals:
                refusals.append(opened.text)
            session = opened.headers.get("mcp-session-id")
            if session is None:
                return
            headers = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
            done = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            statuses[f"initialized: {done.status_code}"] += 1
            ident = 0
            while time.monotonic() < deadline:
                ident += 1
                body = {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "x"}},
                }
                try:
                    reply = await http.post(url, json=body, headers=headers)
                    statuses[f"tools/call: {reply.status_code}"] += 1
                except httpx2.HTTPError as exc:
                    statuses[f"tools/call: {type(exc).__name__}"] += 1
            await http.delete(url, headers=headers)

        limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx2.AsyncClient(timeout=60, limits=limits) as http, anyio.create_task_group() as tg:
            for _ in range(clients):
                tg.start_soon(one, http)
    print(f"crowd: {clients} session-era HTTP clients, --max-sessions {max_sessions}, {seconds:g} s")
    for kind, count in sorted(statuses.items()):
        print(f"  {kind:28} {count}")
    for refusal in refusals[:5]:
        print(f"  refused: {refusal[:200]}")
    unexpected = {kind: count for kind, count in statuses.items() if not kind.endswith((" 200", " 202", " 503"))}
    print(f"  unexpected: {unexpected or 'none'}")


async def stdio(total: int, in_flight: int, sample_every: float) -> None:
    """`total` calls through one stdio proxy, RSS sampled as they go."""
    samples: list[tuple[float, float]] = []
    errors: Counter[str] = Counter()
    done = [0]
    command = [PYTHON, "-m", "frugal_proxy", "--", *FAULTY]
    async with connect(command, cwd=ROOT, reply_timeout=30) as client:
        await client.handshake()
        began = time.monotonic()
        samples.append((0.0, rss_mb(client.pid)))
        log(f"stdio: {total} calls, {in_flight} in flight")

        async def worker() -> None:
            while done[0] < total:
                done[0] += 1
                try:
                    await client.call_tool(ECHO)
                except ClientError as exc:
                    errors[type(exc).__name__] += 1

        async def sampler() -> None:
            while True:
                await anyio.sleep(sample_every)
                samples.append((time.monotonic() - began, rss_mb(client.pid)))
                log(f"  {done[0]} calls, RSS {samples[-1][1]:.1f} MB")

        async with anyio.create_task_group() as outer:
            outer.start_soon(sampler)
            async with anyio.create_task_group() as tg:
                for _ in range(in_flight):
                    tg.start_soon(worker)
            outer.cancel_scope.cancel()
        elapsed = time.monotonic() - began
        samples.append((elapsed, rss_mb(client.pid)))
    first_minute = [rss for at, rss in samples if 0 < at <= 60] or [samples[1][1]]
    reference, end = first_minute[-1], samples[-1][1]
    rate = total / elapsed
    print(f"stdio: {total} calls, {in_flight} in flight, {elapsed:.0f} s ({rate:.0f}/s), errors {sum(errors.values())}")
    print("  RSS (MB) every " + f"{sample_every:g} s: " + ", ".join(f"{rss:.1f}" for _, rss in samples))
    print(
        f"  end {end:.1f} MB vs {reference:.1f} MB at the end of the first minute: {100 * (end / reference - 1):+.1f} %"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--phase", choices=["mixed", "crowd", "stdio", "all"], default="all")
    options = parser.parse_args()
    scale = 6 if options.quick else 1
    if options.phase in ("mixed", "all"):
        await mixed(50, 60 / scale)
    if options.phase in ("crowd", "all"):
        await crowd(200, 30 / scale, 100)
    if options.phase in ("stdio", "all"):
        await stdio(200_000 // scale, 16, 10)


if __name__ == "__main__":
    anyio.run(main)
