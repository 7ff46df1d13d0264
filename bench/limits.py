"""frugal-proxy's HTTP endpoint under crowds, slow clients and bursts, as shipped (default flags).

    .venv/bin/python bench/limits.py [--quick] [--phase mixed|slowloris|burst|all] [--before DIR]

    mixed      50 and 200 HTTP clients for 30 s each, half 2026-07-28, half session-era (a
               session each): calls, errors, p50 / p99. All come from 127.0.0.1, as local
               clients do, and the proxy runs with its default rate limit.
    slowloris  one client's calls alone for 5 s, then 2,000 connections that send a request
               line and then a header byte every 5 s (reopened when closed) for 30 s, from
               127.0.0.2 ("another host") and then from 127.0.0.1 (the same host as the
               client), while the 2026-07-28 client on 127.0.0.1 calls `echo` one call at a
               time: its calls, error rate and p50. The proxy runs with the usual
               file-descriptor limit (`prlimit --nofile=1024:1024`) and no rate limit.
    burst      100 session-era `initialize` at once (`--max-sessions 100`; the upstream is the
               notes server, whose start costs about 0.4 s of CPU), each client giving
               up after 5 s; those answered in time finish the handshake and keep their session.
               Then: sessions held (the proxy's upstream processes, less the shared one) at the
               end of the burst and 15 s later, and the time until a new client's `initialize`
               succeeds (polled every 0.5 s, at most 60 s).

`--before DIR` runs a proxy whose package is DIR/frugal_proxy, for example an earlier commit's:
`git archive REV proxy providers policies | tar -x -C /tmp/t`, then copy /tmp/t/proxy to
/tmp/before/frugal_proxy and /tmp/t/providers and /tmp/t/policies into it; pass /tmp/before.
Every loop is bounded in count and time, all on 127.0.0.1/127.0.0.2. `--quick` divides the
durations by three.
"""

from __future__ import annotations

import argparse
import errno
import json
import resource
import sys
import time
from collections import Counter
from collections.abc import Sequence

import anyio
import anyio.abc
import httpx2

from load import ACCEPT, FAULTY, INITIALIZE, PYTHON, ROOT, call_loop, percentile, run_mixed

from http_client import http_client
from http_columns import HttpColumn, serve
from measure import process_parents
from rpc_client import ClientError

SLOW_REQUEST = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
GIVE_UP = 5.0  # seconds a burst client waits for its initialize
NOTES = [PYTHON, str(ROOT / "examples" / "servers" / "notes_server.py")]  # ~0.4 s of CPU to start


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def column(
    before: str | None, *options: str, nofile: int | None = None, upstream: Sequence[str] = FAULTY
) -> HttpColumn:
    argv = [PYTHON, "-m", "frugal_proxy", "--http", "127.0.0.1:{port}", *options, "--", *upstream]
    if before is not None:
        argv = ["env", f"PYTHONPATH={before}", *argv]
    if nofile is not None:
        argv = ["prlimit", f"--nofile={nofile}:{nofile}", "--", *argv]
    return HttpColumn("frugal", "frugal-proxy", "frugal", "modern", "frugal", argv)


def children(pid: int) -> int:
    """How many processes have `pid` as their parent (the proxy's upstreams)."""
    return sum(1 for parent in process_parents().values() if parent == pid)


async def mixed(before: str | None, clients: int, seconds: float) -> None:
    await run_mixed(column(before), clients, seconds)


async def attack(port: int, source: str, connections: int, seconds: float) -> Counter[str]:
    """`connections` slow connections to `port` from `source` for `seconds`: what became of them."""
    seen: Counter[str] = Counter()
    until = time.monotonic() + seconds

    async def attacker() -> None:
        while time.monotonic() < until:
            try:
                with anyio.fail_after(3):
                    stream = await anyio.connect_tcp("127.0.0.1", port, local_host=source)
            except (OSError, TimeoutError) as exc:
                seen[f"connect failed: {errno.errorcode.get(getattr(exc, 'errno', 0) or 0, 'timeout')}"] += 1
                await anyio.sleep(0.5)
                continue
            seen["connected"] += 1
            async with stream:
                try:
                    await stream.send(SLOW_REQUEST)
                    while time.monotonic() < until:
                        with anyio.move_on_after(5):
                            answer = await stream.receive()
                            seen[f"answered {answer[9:12].decode(errors='replace')}"] += 1
                            break
                        await stream.send(b"X")
                except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
                    seen["closed by the proxy"] += 1
            await anyio.sleep(0.1)

    with anyio.move_on_after(seconds + 10):
        async with anyio.create_task_group() as tg:
            for _ in range(connections):
                tg.start_soon(attacker)
    return seen


async def slowloris(before: str | None, connections: int, seconds: float, source: str) -> None:
    """`connections` slow connections from `source` (another process) while one client calls
    from 127.0.0.1."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    # The rate limit lifted (both trees know the flag): the quiet calls must not use up the old
    # loopback default's burst, or its 429s would hide what the attack does.
    async with serve(column(before, "--rate-limit", "1000000/1000000", nofile=1024)) as server:
        log(f"slowloris: {connections} connections from {source} for {seconds:g} s")
        quiet: list[float] = []
        async with http_client(server.port, "modern", reply_timeout=5) as client:
            await call_loop(client, time.monotonic() + 5, quiet, errors)
        command = [PYTHON, __file__, "--attack", f"{server.port},{source},{connections},{seconds + 5}"]
        async with await anyio.open_process(command, stderr=None) as attacker:
            await anyio.sleep(5)  # the attack in full swing
            began = time.monotonic()
            try:
                async with http_client(server.port, "modern", reply_timeout=5) as client:
                    await call_loop(client, began + seconds, latencies, errors)
            except ClientError as exc:
                errors[f"setup: {type(exc).__name__}: {str(exc)[:90]}"] += 1
            assert attacker.stdout is not None
            with anyio.fail_after(60):
                report = b"".join([chunk async for chunk in attacker.stdout])
                await attacker.wait()
    total = len(latencies) + sum(errors.values())
    print(f"slowloris: {connections} connections from {source}, a client on 127.0.0.1 calling for {seconds:g} s")
    share = 100 * sum(errors.values()) / max(1, total)
    print(f"  client: calls ok {len(latencies)}, errors {sum(errors.values())} ({share:.1f} %)", end="")
    print(f", p50 {percentile(latencies, 0.5) * 1000:.1f} ms" if latencies else "", end="")
    print(f" (before the attack, alone: p50 {percentile(quiet, 0.5) * 1000:.1f} ms)")
    for kind, count in errors.most_common(3):
        print(f"    {count} x {kind}")
    seen: dict[str, int] = json.loads(report or b"{}")
    print("  attacker: " + ", ".join(f"{kind} {count}" for kind, count in sorted(seen.items(), key=lambda x: -x[1])))


async def burst(before: str | None, clients: int) -> None:
    async with serve(column(before, "--max-sessions", str(clients), upstream=NOTES)) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        outcome: Counter[str] = Counter()
        log(f"burst: {clients} initialize at once")
        limits = httpx2.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)

        async def one(http: httpx2.AsyncClient) -> None:
            try:
                opened = await http.post(url, json=INITIALIZE, headers=ACCEPT, timeout=GIVE_UP)
            except httpx2.HTTPError as exc:
                outcome[f"gave up ({type(exc).__name__})"] += 1
                return
            session = opened.headers.get("mcp-session-id")
            outcome[f"HTTP {opened.status_code}"] += 1
            if session is not None:
                headers = {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
                note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                await http.post(url, json=note, headers=headers, timeout=30)

        began = time.monotonic()
        with anyio.fail_after(120):
            async with httpx2.AsyncClient(limits=limits) as http, anyio.create_task_group() as tg:
                for _ in range(clients):
                    tg.start_soon(one, http)
        ended = time.monotonic()
        held_at_end = children(server.pid) - 1
        first_ok: float | None = None
        held_later = -1
        async with httpx2.AsyncClient(timeout=30) as http:
            while time.monotonic() - ended < 60:
                if held_later < 0 and time.monotonic() - ended >= 15:
                    held_later = children(server.pid) - 1
                try:
                    reply = await http.post(url, json=INITIALIZE, headers=ACCEPT)
                except httpx2.HTTPError:
                    reply = None
                if reply is not None and reply.status_code == 200:
                    first_ok = time.monotonic() - ended
                    break
                await anyio.sleep(0.5)
        if held_later < 0:
            await anyio.sleep(max(0.0, 15 - (time.monotonic() - ended)))
            held_later = children(server.pid) - 1
    print(f"burst: {clients} session-era initialize at once, each client giving up after {GIVE_UP:g} s")
    print(f"  burst over in {ended - began:.1f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(outcome.items())))
    print(f"  sessions held: {held_at_end} at the end of the burst, {held_later} 15 s later")
    waited = f"{first_ok:.1f} s" if first_ok is not None else "more than 60 s (gave up)"
    print(f"  a new client's initialize succeeded after {waited}")


def raise_own_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--phase", choices=["mixed", "slowloris", "burst", "all"], default="all")
    parser.add_argument("--before", metavar="DIR", help="run the frugal_proxy package found in DIR")
    parser.add_argument("--attack", metavar="PORT,SOURCE,N,SECONDS", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    raise_own_fd_limit()
    if options.attack:  # the slowloris phase's attacker, in a process of its own
        port, source, connections, seconds = options.attack.split(",")
        print(json.dumps(await attack(int(port), source, int(connections), float(seconds))))
        return
    scale = 3 if options.quick else 1
    print(f"frugal-proxy {'from ' + options.before if options.before else 'of this tree'}")
    if options.phase in ("mixed", "all"):
        for clients in (50, 200):
            await mixed(options.before, clients, 30 / scale)
    if options.phase in ("slowloris", "all"):
        for source in ("127.0.0.2", "127.0.0.1"):
            await slowloris(options.before, 2000, 30 / scale, source)
    if options.phase in ("burst", "all"):
        await burst(options.before, 100)


if __name__ == "__main__":
    anyio.run(main)
