"""What a Prometheus scraping `/metrics` every second costs the calls: plain and routed calls'
p50 latency and the proxy's CPU per call, with the scraper on against off.

    python bench/metrics_bench.py [--calls 400] [--rounds 6] [--interval 1.0]

One `serve --config --http` on 127.0.0.1 with the notes server as its upstream and a routed
`frugal__search` over Wikipedia's REST search, answered by the tests' loopback fake
(tests/servers/fake_apis.py) in a thread of this process. A round is `--calls` calls made one
after another (each different: no cache, no loop guard); rounds alternate scraper off and on,
for plain (`add`) and routed (`frugal__search`) calls, so machine drift lands on both alike. CPU
is the proxy process's own (user + system, /proc), per call; the scraper's GETs are counted in
it, as a real scrape's would be. Printed as ratios on / off; traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from frugal_proxy.providers import registry  # noqa: E402
from tests.conftest import notes_command  # noqa: E402
from tests.e2e.test_http_downstream import Proxy, modern_body, modern_headers  # noqa: E402
from tests.servers.fake_apis import fake_apis  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")
READS = 200


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def config_text(wikipedia: str) -> str:
    off = "".join(
        f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
        for builtin in registry.built_ins()
        if builtin.name != "wikipedia"
    )
    return (
        f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n"
        f'[search_providers.wikipedia]\nbase_url = "{wikipedia}"\n' + off
    )


def call_body(kind: str, n: int) -> tuple[dict[str, object], dict[str, str]]:
    if kind == "plain":
        params = {"name": "add", "arguments": {"a": n, "b": 1}}
        return modern_body("tools/call", params, ident=n), modern_headers("tools/call", "add")
    params = {"name": "frugal__search", "arguments": {"query": f"proxy {n}", "max_results": 3}}
    return modern_body("tools/call", params, ident=n), modern_headers("tools/call", "frugal__search")


async def scraper(
    http: httpx2.AsyncClient, base: str, interval: float, scrapes: list[int], first: anyio.Event, path: str = "/metrics"
) -> None:
    while True:
        reply = await http.get(f"{base}{path}")
        if reply.status_code != 200:
            raise RuntimeError(f"{path} answered {reply.status_code}")
        scrapes[0] += 1
        first.set()
        await anyio.sleep(interval)


async def one_round(
    http: httpx2.AsyncClient,
    proxy: Proxy,
    kind: str,
    calls: int,
    start: int,
    scrape: float | None,
    path: str = "/metrics",
) -> tuple[list[float], float, int]:
    """(latencies in seconds, proxy CPU seconds, GETs of `path` made) of `calls` calls in a row,
    with `path` read every `scrape` seconds meanwhile (None: not read)."""
    latencies: list[float] = []
    scrapes = [0]
    async with anyio.create_task_group() as tg:
        if scrape is not None:
            first = anyio.Event()
            tg.start_soon(scraper, http, proxy.base, scrape, scrapes, first, path)
            await first.wait()  # the first scrape is in before the clock starts
        before = cpu_seconds(proxy.process.pid)
        for n in range(start, start + calls):
            body, headers = call_body(kind, n)
            began = time.perf_counter()
            reply = await http.post(proxy.url, json=body, headers=headers)
            latencies.append(time.perf_counter() - began)
            result = reply.json().get("result")
            if reply.status_code != 200 or result is None or result.get("isError"):
                raise RuntimeError(f"{kind} call {n} failed: {reply.status_code} {reply.text[:200]}")
        cpu = cpu_seconds(proxy.process.pid) - before
        tg.cancel_scope.cancel()
    return latencies, cpu, scrapes[0]


T = TypeVar("T")
Found = dict[tuple[str, bool], tuple[list[float], float, int]]
Figures = dict[tuple[str, bool], dict[str, float]]


async def alternate(
    http: httpx2.AsyncClient, proxy: Proxy, calls: int, rounds: int, interval: float, path: str = "/metrics"
) -> tuple[Found, int]:
    """Rounds of plain and routed calls with `path` read every `interval` seconds and not, in
    alternating order (after a warm-up): per (kind, read), the latencies, CPU and reads; and
    how many calls were measured."""
    found: Found = {}
    for kind in ("plain", "routed"):  # warm-up: connections, imports, the first read
        await one_round(http, proxy, kind, 50, 10_000_000, interval, path)
    n = 0
    for round_ in range(rounds):
        order = [False, True] if round_ % 2 == 0 else [True, False]
        for kind in ("plain", "routed"):
            for read in order:
                latencies, cpu, reads = await one_round(http, proxy, kind, calls, n, interval if read else None, path)
                n += calls
                kept = found.setdefault((kind, read), ([], 0.0, 0))
                found[(kind, read)] = (kept[0] + latencies, kept[1] + cpu, kept[2] + reads)
    return found, n


def per_call(found: Found, reads: str = "scrapes") -> dict[tuple[str, bool], dict[str, float]]:
    """p50 and CPU per call of each (kind, read), with the reads made."""
    return {
        key: {
            "p50_ms": statistics.median(latencies) * 1000,
            "cpu_us_per_call": cpu / len(latencies) * 1e6,
            reads: made,
            "calls": len(latencies),
        }
        for key, (latencies, cpu, made) in found.items()
    }


def run_serve(measure: Callable[[Proxy], Awaitable[T]]) -> T:
    """`measure` against one `serve --config --http` over the notes server and the loopback
    Wikipedia fake, in a temporary FRUGAL_HOME (the usage ledger on)."""
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as folder, fake_apis() as apis:
        path = Path(folder) / "frugal.toml"
        path.write_text(config_text(f"{apis.base}/wikipedia"))
        argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path), "--http", "127.0.0.1:0"]
        proxy = Proxy(argv, {"FRUGAL_HOME": str(Path(folder) / "home")})
        try:
            proxy.wait_listening()
            return anyio.run(measure, proxy)
        finally:
            proxy.stop()


def print_rounds(figures: Figures, rounds: int, calls: int, reads: str = "scrapes") -> None:
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}; {rounds} rounds x {calls} calls a condition")
    print(f"{'':8} {'p50 off':>9} {'p50 on':>9} {'ratio':>6}   {'CPU off':>9} {'CPU on':>9} {'ratio':>6}   {reads}")
    for kind in ("plain", "routed"):
        off, on = figures[(kind, False)], figures[(kind, True)]
        print(
            f"{kind:8} {off['p50_ms']:7.2f}ms {on['p50_ms']:7.2f}ms {on['p50_ms'] / off['p50_ms']:6.3f}   "
            f"{off['cpu_us_per_call']:7.0f}us {on['cpu_us_per_call']:7.0f}us "
            f"{on['cpu_us_per_call'] / off['cpu_us_per_call']:6.3f}   {on[reads]:.0f}"
        )


async def measure(
    proxy: Proxy, options: argparse.Namespace, path: str = "/metrics", reads: str = "scrapes"
) -> tuple[Figures, str]:
    """The alternating rounds, then READS (200) GETs of `path` back to back for one read's own
    cost; and the last read's text."""
    async with httpx2.AsyncClient(timeout=60) as http:
        found, _ = await alternate(http, proxy, options.calls, options.rounds, options.interval, path)
        before = cpu_seconds(proxy.process.pid)
        took = []
        for _ in range(READS):  # one read's own cost, back to back, with everything filled
            began = time.perf_counter()
            text = (await http.get(f"{proxy.base}{path}")).text
            took.append(time.perf_counter() - began)
        read_cpu = (cpu_seconds(proxy.process.pid) - before) / READS
    figures = per_call(found, reads)
    figures[("read", True)] = {"p50_ms": statistics.median(took) * 1000, "cpu_us": read_cpu * 1e6, "bytes": len(text)}
    return figures, text


def main(doc: str = __doc__ or "", path: str = "/metrics", reads: str = "scrapes") -> Figures:
    """Parse the options, measure, print; what was measured (bench/ui_bench.py runs it over /ui/data)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="calls per round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each kind and condition")
    parser.add_argument("--interval", type=float, default=1.0, help=f"seconds between GETs of {path}")
    options = parser.parse_args()
    figures, text = run_serve(lambda proxy: measure(proxy, options, path, reads))
    if path == "/metrics":
        total = sum(
            float(line.rpartition(" ")[2]) for line in text.splitlines() if line.startswith("frugal_calls_total{")
        )
        measured = sum(figure["calls"] for key, figure in figures.items() if key[0] != "read")
        if total < measured:
            raise RuntimeError(f"/metrics counted {total:.0f} calls of the {measured} measured")
    print_rounds(figures, options.rounds, options.calls, reads)
    read = figures[("read", True)]
    print(
        f"one GET of {path} ({read['bytes']:.0f} bytes, {READS} back to back): p50 {read['p50_ms']:.2f} ms, "
        f"proxy CPU {read['cpu_us']:.0f} us"
    )
    return figures


if __name__ == "__main__":
    main()
