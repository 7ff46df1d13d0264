"""What the Redis backend adds to a routed call, beside the memory backend, in-process: a routed
`frugal__search` with every guard on (route_bench's `guarded`: loop guard, domains, the result
cache, ceiling, a daily budget that reserves and settles, cooldown), its provider answered by an
httpx2 MockTransport, once with `[state] backend = "memory"` and once against a redis-server this
script starts on 127.0.0.1 (`--save "" --appendonly no`). Each call is a new query, so the cache
misses and stores each answer: the Redis run pays for the loop-guard script and the cache GET
(one pipeline: the admit phase's round trip), the reservation script (dispatch) and the cache put
(seal).

It prints, per call, the p50 and p90 of wall time and the CPU time of this process (the Redis
server's own CPU is not counted), each Redis figure beside the memory one as the added
microseconds and the ratio, and per call the Redis round trips (writes on the link's
connections, counted by tests/redis_server.py's Wire) and commands (INFO commandstats); the
goal is at most 0.3 ms added p50 on loopback. A plain tool call through the same assembly is
counted too: it should make no Redis command at all.

    .venv/bin/python bench/state_bench.py [--calls 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import httpx2

from frugal_proxy import config
from frugal_proxy.config import ProviderConfig
from frugal_proxy.pipeline.assembly import Assembly, assemble
from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
from frugal_proxy.providers import wikipedia
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.registry import Setup
from frugal_proxy.records import ProviderSpec
from route_bench import ARGUMENTS, GUARDED, answer, exchange, plain_pipeline

from rpc_client import isolated_home

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.redis_server import Wire


def start_redis(directory: str) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*argv, "--dir", directory], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    for line in process.stdout:
        if b"Ready to accept connections" in line:
            return process, port
    raise SystemExit("redis-server did not start")


# The commands a client sends (INFO commandstats counts those a script runs too).
SENT = ("cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_get:")


def commands(port: int) -> int:
    """Commands so far: scripts run and cache reads (not the scripts' own commands, not the
    watcher's pings)."""
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True, check=True)
    return sum(
        int(line.split("calls=")[1].split(",")[0]) for line in out.stdout.decode().splitlines() if line.startswith(SENT)
    )


def guarded(http: HttpClient, state: str) -> tuple[Assembly, Pipeline]:
    spec = ProviderSpec("wikipedia", "search", 1)
    paid = wikipedia.Wikipedia(Setup(spec, "https://wiki.example", None, 15.0, http, ProviderConfig(), {}))
    assembly = assemble(config=config.loads(GUARDED + state), environ={})
    return assembly, build_pipeline({"wikipedia": paid}, assembly.policies, assembly.dispatch)


async def timed(calls: int, run: Callable[[], Awaitable[object]]) -> tuple[list[float], float]:
    """Wall microseconds of each call, and CPU microseconds per call."""
    for _ in range(50):
        await run()
    walls: list[float] = []
    started = time.process_time()
    for _ in range(calls):
        begun = time.perf_counter()
        await run()
        walls.append((time.perf_counter() - begun) * 1e6)
    return walls, (time.process_time() - started) / calls * 1e6


async def main_async(calls: int, repeat: int, port: int) -> None:
    http = HttpClient(transport=httpx2.MockTransport(answer))
    state = f'\n[state]\nbackend = "redis"\nurl = "redis://127.0.0.1:{port}/0"\n'
    figures: dict[str, list[tuple[float, float, float]]] = {"memory": [], "redis": []}
    per_call: dict[str, float] = {}
    wire = Wire()
    async with anyio.create_task_group() as tg:
        for backend, extra in (("memory", ""), ("redis", state)):
            assembly, pipeline = guarded(http, extra)
            if assembly.redis is not None:
                wire.counting(assembly.redis)
            await assembly.start(tg)
            queries = iter(range(10**9))

            def fresh(pipeline: Pipeline = pipeline, queries: Iterator[int] = queries) -> Awaitable[object]:
                arguments = {**ARGUMENTS, "query": f"hit {next(queries)}", "max_cost_usd": "0.01"}
                return pipeline.run(exchange(("wikipedia",), arguments))

            before, trips = commands(port), len(wire.writes)
            for _ in range(repeat):
                walls, cpu = await timed(calls, fresh)
                walls.sort()
                figures[backend].append((statistics.median(walls), walls[int(len(walls) * 0.9)], cpu))
            per_call[backend] = (commands(port) - before) / ((calls + 50) * repeat)
            per_call[f"{backend} trips"] = (len(wire.writes) - trips) / ((calls + 50) * repeat)
            upstream, plain, fresh_plain = plain_pipeline()
            if backend == "redis":
                assembly_plain = assemble(config=config.loads(GUARDED + state), environ={})
                assert assembly_plain.redis is not None
                wire.counting(assembly_plain.redis)
                plain = build_pipeline({"up": upstream}, assembly_plain.policies, assembly_plain.dispatch)
                before, trips = commands(port), len(wire.writes)
                for _ in range(200):
                    await plain.run(fresh_plain())
                per_call["plain"] = (commands(port) - before) / 200
                per_call["plain trips"] = (len(wire.writes) - trips) / 200
                await assembly_plain.aclose()
            await assembly.aclose()
        tg.cancel_scope.cancel()
    await http.close()
    best = {backend: min(runs) for backend, runs in figures.items()}
    memory, redis = best["memory"], best["redis"]
    print(f"routed call, every guard on, memory vs redis backend ({calls} calls, best of {repeat}):")
    for index, label in ((0, "p50 wall"), (1, "p90 wall"), (2, "CPU (this process)")):
        added = redis[index] - memory[index]
        print(
            f"  {label:<20} memory {memory[index]:8.1f} us   redis {redis[index]:8.1f} us   "
            f"(+{added:.1f} us, {redis[index] / memory[index]:.2f}x)"
        )
    print(
        f"  Redis round trips per routed call: {per_call['redis trips']:.2f} ({per_call['redis']:.2f} commands); "
        f"per plain call: {per_call['plain trips']:.2f} ({per_call['plain']:.2f} commands)"
    )
    added = redis[0] - memory[0]
    print(f"  goal: at most 300 us added p50 on loopback  [{'MET' if added <= 300 else 'MISSED'}] +{added:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed (scripts/setup.sh installs it)")
    isolated_home()  # the assembly writes ledger lines: into a temporary home
    with tempfile.TemporaryDirectory() as directory:
        process, port = start_redis(directory)
        try:
            anyio.run(main_async, options.calls, options.repeat, port)
        finally:
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    main()
