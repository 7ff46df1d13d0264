"""100 concurrent 2026-07-28 calls: three replicas behind HAProxy against one replica direct.

    python bench/fleet_bench.py [--concurrency 100] [--rounds 20] [--no-redis]

Both setups run on this machine's cores: `serve --http` with the notes server as its one
upstream (tests/e2e/fleet.py starts the replicas and HAProxy with examples/fleet/haproxy.cfg,
as the end-to-end tests do). A round is `--concurrency` `tools/call` POSTs sent at once from one
httpx2 client (JSON answers, keep-alive); the figures are calls a second over every round and
the median latency of one call. Printed as the ratio fleet / single: on one machine three
replicas share the cores one replica had, so the ratio says what the balancer and the extra
processes cost (or gain: three event loops instead of one), not what three machines would give.

Then the same on the shared books (unless --no-redis): a redis-server on 127.0.0.1 (no
persistence) and routed `frugal__search` calls of a loopback Wikipedia priced $0.0030 with a
daily cap too high to bite, each call a new query (the loop guard's script and the reservation:
two round trips a call), one replica direct against three behind HAProxy, all on that Redis;
and last the cap overshoot: 100 concurrent calls through the fleet against a $0.0100 cap, the
calls that reached the provider (the fake's own count) against the three that fit.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.fleet import Fleet, on_redis, priced_notes_config, running_fleet, start_replica  # noqa: E402
from tests.e2e.test_http_downstream import modern_body, modern_headers  # noqa: E402
from tests.e2e.test_redis_state import OFF  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402
from tests.servers.fake_apis import FakeApis, fake_apis  # noqa: E402

WARMUP_ROUNDS = 3
PRICE, CAP = 3000, 10_000  # micro-dollars: the overshoot run's price and cap


def add(n: int) -> tuple[str, dict[str, object]]:
    return "add", {"a": n, "b": 1}


def searching(n: int) -> tuple[str, dict[str, object]]:
    return "frugal__search", {"query": f"proxy {n}"}


async def one_call(
    http: httpx2.AsyncClient, url: str, n: int, latencies: list[float], tool: object = add, served: bool = True
) -> bool:
    """One call; whether it was answered without a tool error (a failure to answer raises, and
    so does a tool error when `served` is asked for)."""
    name, arguments = tool(n)  # type: ignore[operator]
    body = modern_body("tools/call", {"name": name, "arguments": arguments}, ident=n)
    started = time.perf_counter()
    answer = await http.post(url, json=body, headers=modern_headers("tools/call", name))
    latencies.append(time.perf_counter() - started)
    if answer.status_code != 200 or "result" not in answer.json():
        raise RuntimeError(f"call {n} failed: {answer.status_code} {answer.text[:200]}")
    ok = not answer.json()["result"].get("isError")
    if served and not ok:
        raise RuntimeError(f"call {n} was refused: {answer.text[:300]}")
    return ok


async def measure(url: str, concurrency: int, rounds: int, tool: object = add) -> tuple[float, float]:
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
                    tg.start_soon(one_call, http, url, round_ * concurrency + n, latencies, tool)
        elapsed = time.perf_counter() - started
    return rounds * concurrency / elapsed, statistics.median(latencies) * 1000


async def overshoot(url: str, calls: int) -> int:
    """`calls` paid searches at once; how many were served."""
    served: list[bool] = []
    limits = httpx2.Limits(max_connections=calls, max_keepalive_connections=calls)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as http:

        async def one(n: int) -> None:
            served.append(await one_call(http, url, 10**6 + n, [], searching, served=False))

        async with anyio.create_task_group() as tg:
            for n in range(calls):
                tg.start_soon(one, n)
    return sum(served)


@contextmanager
def redis_server(folder: Path) -> Iterator[RedisServer]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder.mkdir(parents=True, exist_ok=True)
    server = RedisServer(port, folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def paid_search(folder: Path, apis: FakeApis, server: RedisServer, cap: str) -> Path:
    """wikipedia at $0.0030 under a daily cap of `cap`, every other built-in off, on `server`."""
    config = folder / f"paid-{cap}.toml"
    config.write_text(
        f'[search_providers.wikipedia]\nbase_url = "{apis.base}/wikipedia"\n'
        f'cost_per_call = "0.003"\ndaily_budget_usd = "{cap}"\n{OFF}[routing]\nloop_window = "10m"\n'
    )
    return on_redis(config, server)


def shared_books(work: Path, concurrency: int, rounds: int) -> None:
    """The routed, capped calls on one redis-server: one replica against three, then the overshoot."""
    with fake_apis() as apis:
        with redis_server(work / "redis-throughput") as server:
            config = paid_search(work, apis, server, "1000")
            single = start_replica(config, work / "redis-single-home", "single", "--stateless")
            try:
                one = anyio.run(measure, single.url, concurrency, rounds, searching)
            finally:
                single.proxy.stop()
        with redis_server(work / "redis-fleet") as server:
            config = paid_search(work / "redis-fleet", apis, server, "1000")
            with running_fleet(work / "redis-fleet", config, "--stateless") as fleet:
                three = anyio.run(measure, fleet.front, concurrency, rounds, searching)
        with redis_server(work / "redis-cap") as server:
            config = paid_search(work / "redis-cap", apis, server, "0.01")
            with running_fleet(work / "redis-cap", config, "--stateless") as fleet:
                before = apis.requests["wikipedia"]
                served = anyio.run(overshoot, fleet.front, 100)
                reached = apis.requests["wikipedia"] - before
    print(f"routed, capped, on Redis: {concurrency} concurrent calls x {rounds} rounds")
    print(f"one replica direct       {one[0]:8.1f} calls/s   p50 {one[1]:7.1f} ms")
    print(f"3 replicas behind HAProxy {three[0]:7.1f} calls/s   p50 {three[1]:7.1f} ms")
    print(f"ratio fleet / single     throughput {three[0] / one[0]:.2f}   p50 {three[1] / one[1]:.2f}")
    spent = reached * PRICE
    print(
        f"cap overshoot, 100 concurrent calls over 3 replicas, ${CAP / 1e6:.4f} cap at ${PRICE / 1e6:.4f}: "
        f"{reached} reached the provider ({served} served), ${spent / 1e6:.4f} spent, "
        f"{max(0, spent - CAP) / PRICE:.2f} of a call's price past the cap (goal: at most 1)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-redis", action="store_true", help="leave out the runs on the shared books")
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
    if not options.no_redis:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-redis-") as folder:
            shared_books(Path(folder), options.concurrency, options.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
