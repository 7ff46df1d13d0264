"""Many session-era HTTP clients against `serve --http` with three stdio upstreams: how many
processes, how much memory, how many calls a second.

    .venv/bin/python bench/share_bench.py [--clients 100] [--seconds 15] [--share true|false|default]

Each client opens a session (`initialize` declaring no capabilities, then
`notifications/initialized`) and, once all are open, calls `a__echo`, `b__echo`, `c__echo` in
turn, one call in flight per client, for `--seconds`. The upstreams are the faulty test server's
`echo` (tests/servers/faulty_server.py: raw JSON-RPC in one small Python process). Printed: the
proxy's child processes, the proxy's RSS and that of its children (MB), calls per second and the
p50 / p99 latency (ms). `--share false` writes `share = false` for every upstream (one process per
session and upstream); `default` writes no `share` key, so that the same run works on a tree from
before the knob existed (a before/after pair: run it there and here).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio

from http_client import HttpClient
from measure import process_parents, status_kib
from rpc_client import ClientError

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
FAULTY = [PYTHON, str(ROOT / "tests" / "servers" / "faulty_server.py")]
UPSTREAMS = ("a", "b", "c")
CALLS = [b'{"name":"%s__echo","arguments":{"text":"share"}}' % name.encode() for name in UPSTREAMS]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def config_text(share: str) -> str:
    command = ", ".join(f'"{part}"' for part in FAULTY)
    knob = "" if share == "default" else f"share = {share}\n"
    return "".join(f"[upstreams.{name}]\ncommand = [{command}]\n{knob}\n" for name in UPSTREAMS)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...)."""
    parents = process_parents()
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def rss_mb(pid: int) -> float:
    return (status_kib(pid, "VmRSS") or 0) / 1024


@contextlib.contextmanager
def serve(share: str, clients: int) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`serve --http` on a free port of 127.0.0.1 with the three upstreams; stopped on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "frugal.toml"
        config.write_text(config_text(share))
        argv = [PYTHON, "-m", "frugal_proxy", "serve", "--config", str(config), "--http", "127.0.0.1:0"]
        argv += ["--rate-limit", "1000000/1000000", "--max-sessions", str(clients + 10)]
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert process.stderr is not None
        port = 0
        while not port:
            line = process.stderr.readline().decode()
            if not line:
                raise SystemExit("the proxy exited before listening")
            if "listening on " in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
        drain = threading.Thread(target=process.stderr.read, daemon=True)  # keep its stderr from filling up
        drain.start()
        try:
            yield process, port
        finally:
            process.terminate()
            process.wait(30)
            drain.join(5)


async def run(process: subprocess.Popen[bytes], port: int, clients: int, seconds: float, share: str) -> None:
    base_children = len(descendants(process.pid))
    opened: list[HttpClient] = []
    gate = anyio.Semaphore(20)

    async def open_one() -> None:
        async with gate:
            client = HttpClient("127.0.0.1", port, "/mcp", "session", 60.0)
            await client.handshake()
            opened.append(client)

    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(clients):
            tg.start_soon(open_one)
    # The first call of each session starts its upstreams (a session's own ones start as
    # they would); one round of calls brings every session to its steady state.
    for client in opened:
        for call in CALLS:
            await client.call_tool(call)
    open_seconds = time.monotonic() - started
    children = descendants(process.pid)
    proxy_rss = rss_mb(process.pid)
    children_rss = sum(rss_mb(pid) for pid in children)
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds

    async def loop(client: HttpClient, offset: int) -> None:
        nonlocal errors
        turn = offset
        while time.monotonic() < deadline:
            began = time.perf_counter()
            try:
                await client.call_tool(CALLS[turn % len(CALLS)])
            except ClientError:
                errors += 1
            latencies.append(time.perf_counter() - began)
            turn += 1

    began = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i, client in enumerate(opened):
            tg.start_soon(loop, client, i)
    elapsed = time.monotonic() - began
    peak_rss = rss_mb(process.pid)
    for client in opened:
        client.close()
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1e3 if latencies else float("nan")
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e3 if latencies else float("nan")
    print(f"share={share} clients={clients} seconds={seconds:g}")
    print(f"  child processes   {len(children) - base_children} for the sessions ({len(children)} in all)")
    print(f"  proxy RSS         {proxy_rss:.1f} MB after opening, {peak_rss:.1f} MB after the load")
    print(f"  children RSS      {children_rss:.1f} MB")
    print(f"  open + first call {open_seconds:.1f} s")
    print(
        f"  calls             {len(latencies)} in {elapsed:.1f} s = {len(latencies) / elapsed:.0f}/s, {errors} errors"
    )
    print(f"  latency           p50 {p50:.2f} ms, p99 {p99:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--share", choices=("true", "false", "default"), default="default")
    options = parser.parse_args()
    with serve(options.share, options.clients) as (process, port):
        anyio.run(run, process, port, options.clients, options.seconds, options.share)


if __name__ == "__main__":
    main()
