"""100 concurrent 2026-07-28 calls: three replicas behind HAProxy against one replica direct.

    python bench/fleet_bench.py [--concurrency 100] [--rounds 20]

Both setups run on this machine's cores: `serve --http` with the notes server as its one
upstream (tests/e2e/fleet.py starts the replicas and HAProxy with examples/fleet/haproxy.cfg,
as the end-to-end tests do). A round is `--concurrency` `tools/call` POSTs sent at once from one
httpx2 client (JSON answers, keep-alive); the figures are calls a second over every round and
the median latency of one call. Printed as the ratio fleet / single: on one machine three
replicas share the cores one replica had, so the ratio says what the balancer and the extra
processes cost (or gain: three event loops instead of one), not what three machines would give.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.fleet import Fleet, priced_notes_config, running_fleet, start_replica  # noqa: E402
from tests.e2e.test_http_downstream import modern_body, modern_headers  # noqa: E402

WARMUP_ROUNDS = 3


async def one_call(http: httpx2.AsyncClient, url: str, n: int, latencies: list[float]) -> None:
    body = modern_body("tools/call", {"name": "add", "arguments": {"a": n, "b": 1}}, ident=n)
    started = time.perf_counter()
    answer = await http.post(url, json=body, headers=modern_headers("tools/call", "add"))
    latencies.append(time.perf_counter() - started)
    if answer.status_code != 200 or "result" not in answer.json():
        raise RuntimeError(f"call {n} failed: {answer.status_code} {answer.text[:200]}")


async def measure(url: str, concurrency: int, rounds: int) -> tuple[float, float]:
    """(calls a second, median latency in ms) over `rounds` rounds after a warm-up."""
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
        latencies: list[float] = []
        for round_ in range(WARMUP_ROUNDS + rounds):
            if round_ == WARMUP_ROUNDS:
                latencies.clear()
                started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for n in range(concurrency):
                    tg.start_soon(one_call, http, url, round_ * concurrency + n, latencies)
        elapsed = time.perf_counter() - started
    return rounds * concurrency / elapsed, statistics.median(latencies) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as folder:
        work = Path(folder)
        config = priced_notes_config(work)
        single = start_replica(config, work / "single-home", "single", "--stateless")
        try:
            one = anyio.run(measure, single.url, options.concurrency, options.rounds)
        finally:
            single.proxy.stop()
        fleet: Fleet
        with running_fleet(work, config, "--stateless") as fleet:
            three = anyio.run(measure, fleet.front, options.concurrency, options.rounds)
    print(f"{options.concurrency} concurrent calls x {options.rounds} rounds")
    print(f"one replica direct       {one[0]:8.1f} calls/s   p50 {one[1]:7.1f} ms")
    print(f"3 replicas behind HAProxy {three[0]:7.1f} calls/s   p50 {three[1]:7.1f} ms")
    print(f"ratio fleet / single     throughput {three[0] / one[0]:.2f}   p50 {three[1] / one[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
