"""What tracing costs (docs/tracing.md): a plain call over stdio, and a routed call's CPU.

    stdio p50   a plain tools/call (the notes server's `add`) through `python -m frugal_proxy --`,
                one call at a time, in interleaved rounds (the column order rotates), the bench's
                own JSON-RPC client (rpc_client.py, the session-era handshake):
        not installed   the proxy's interpreter refuses every `opentelemetry` import (an import
                        hook put in front of `frugal_proxy`'s main): the proxy as without the extra
        off             the extra installed, no exporter named: the default
        on              OTEL_EXPORTER_OTLP_ENDPOINT at a receiver on 127.0.0.1 (a child process
                        that answers 200 and drops what it gets): every span exported
    routed CPU over stdio
                a routed `frugal__search` through `python -m frugal_proxy serve` (one provider,
                Wikipedia's search at a loopback fake: a child process answering the documented
                shape over HTTP/1.1 keep-alive), each call a new query, tracing off and on: the
                serve process's own CPU time (utime + stime of /proc/PID/stat, its export thread
                included) per call, over interleaved rounds
    routed CPU in process
                route_bench's routed `frugal__search` (three providers, two failing over; and one
                provider alone) in process, inside the server span the router opens, tracing off
                and on (the SDK's BatchSpanProcessor and OTLP/HTTP exporter to the same receiver,
                flushed inside the timed part): CPU time of this process per call, its export
                thread included; the Web API is an httpx2 MockTransport, so the call itself is
                as cheap as it gets and the ratio is the strictest one

Figures are ratios to `off`; the goal: `not installed` and `off` alike, tracing under 10 % of a
routed call's CPU. Nothing leaves the machine.

    .venv/bin/python bench/trace_bench.py [--calls 1000] [--rounds 5] [--cpu-calls 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx2

from route_bench import answer, driver, exchange

from columns import ROOT, VENV_PYTHON, notes_upstream
from measure import percentile
from rpc_client import RawClient, connect, isolated_home

# A loopback HTTP server for a child process: `drop` answers every POST 200 and forgets it (an
# OTLP receiver), `search` answers every GET with five Wikipedia search pages (the documented
# {"pages": [{id, key, title, excerpt}]}), both on HTTP/1.1 keep-alive.
LOOPBACK = """
import http.server, json, sys
SEARCH = json.dumps({"pages": [{"id": n, "key": f"Page_{n}", "title": f"Page {n}", "excerpt": f"a hit {n}"}
                               for n in range(5)]}).encode()
class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self, body):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.answer(b"")
    def do_GET(self):
        self.answer(SEARCH)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
# The proxy as without the extra: any `opentelemetry` import fails, as it would not be installed.
NOT_INSTALLED = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
from frugal_proxy.cli.main import main
sys.exit(main(sys.argv[1:]))
"""
OTEL_CLEARED = {key: "" for key in os.environ if key.startswith("OTEL_")}


def child_server(script: str) -> tuple[subprocess.Popen[str], str]:
    """A loopback HTTP server in a child process (its CPU is not the proxy's), and its base URL."""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    return process, f"http://127.0.0.1:{port}"


def commands(endpoint: str) -> dict[str, list[str]]:
    upstream = notes_upstream().command
    python = str(VENV_PYTHON)
    off = ["env", *(f"-u{key}" for key in OTEL_CLEARED)]
    return {
        "not installed": [*off, python, "-c", NOT_INSTALLED, "--", *upstream],
        "off": [*off, python, "-m", "frugal_proxy", "--", *upstream],
        "on": [*off, f"OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}", python, "-m", "frugal_proxy", "--", *upstream],
    }


@asynccontextmanager
async def sessions(endpoint: str) -> AsyncIterator[dict[str, RawClient]]:
    async with AsyncExitStack() as stack:
        opened = {}
        for key, command in commands(endpoint).items():
            client = await stack.enter_async_context(connect(command, cwd=ROOT))
            await client.handshake()
            opened[key] = client
        yield opened


async def stdio_p50(endpoint: str, calls: int, rounds: int) -> dict[str, float]:
    """p50 milliseconds of one small call at a time, per column."""
    samples: dict[str, list[float]] = {}
    nonce = 0
    async with sessions(endpoint) as clients:
        keys = list(clients)
        for turn in range(-1, rounds):
            for key in keys[turn % len(keys) :] + keys[: turn % len(keys)]:
                for _ in range(max(1, calls // rounds) if turn >= 0 else 100):
                    nonce += 1
                    started = time.perf_counter()
                    await clients[key].call_tool(b'{"name":"add","arguments":{"a":%d,"b":3}}' % nonce)
                    if turn >= 0:
                        samples.setdefault(key, []).append((time.perf_counter() - started) * 1000)
    return {key: percentile(values, 50) for key, values in samples.items()}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (not its children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def served_cpu(endpoint: str, api: str, calls: int, rounds: int) -> dict[str, float]:
    """The serve process's CPU microseconds per routed call, tracing off and on."""
    from frugal_proxy.providers import registry

    off_list = "".join(
        f"[{b.capability}_providers.{b.name}]\nenabled = false\n" for b in registry.built_ins() if b.name != "wikipedia"
    )
    config = Path(isolated_home()) / "trace-bench.toml"
    config.write_text(f'[search_providers.wikipedia]\nbase_url = "{api}"\n{off_list}')
    python = str(VENV_PYTHON)
    off = ["env", *(f"-u{key}" for key in OTEL_CLEARED)]
    serve = [python, "-m", "frugal_proxy", "serve", "--config", str(config)]
    columns = {"off": [*off, *serve], "on": [*off, f"OTEL_EXPORTER_OTLP_ENDPOINT={endpoint}", *serve]}
    used = dict.fromkeys(columns, 0.0)
    counted = dict.fromkeys(columns, 0)
    nonce = 0
    async with AsyncExitStack() as stack:
        clients = {}
        for key, command in columns.items():
            clients[key] = await stack.enter_async_context(connect(command, cwd=ROOT))
            await clients[key].handshake()
        keys = list(clients)
        for turn in range(-1, rounds):
            for key in keys[turn % len(keys) :] + keys[: turn % len(keys)]:
                client = clients[key]
                count = max(1, calls // rounds) if turn >= 0 else 50
                before = cpu_seconds(client.pid)
                for _ in range(count):
                    nonce += 1
                    await client.call_tool(b'{"name":"frugal__search","arguments":{"query":"hit %d"}}' % nonce)
                if turn >= 0:
                    used[key] += cpu_seconds(client.pid) - before
                    counted[key] += count
    return {key: used[key] / counted[key] * 1e6 for key in columns}


async def routed_cpu(endpoint: str, calls: int, repeat: int) -> dict[str, float]:
    """CPU microseconds per routed call, tracing off and on, best of `repeat`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from frugal_proxy import tracing
    from frugal_proxy.config import CapabilityRouting, GovernorSettings
    from frugal_proxy.pipeline.assembly import assemble
    from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
    from frugal_proxy.policies.routing import Routing
    from frugal_proxy.providers.http_client import HttpClient
    from frugal_proxy.state.latency import MemoryLatency
    from frugal_proxy.state.usage import MemoryUsage

    http = HttpClient(transport=httpx2.MockTransport(answer))
    winner = driver("wiki", "wiki.example", http)
    providers = {"down": driver("down", "down.example", http), "empty": driver("empty", "empty.example", http)}
    routing = Routing({"search": CapabilityRouting(order=["down", "empty"])}, MemoryUsage(time.time), MemoryLatency())
    governed = assemble(GovernorSettings()).policies
    routed = build_pipeline({**providers, "wiki": winner}, [routing, *governed])
    single = build_pipeline({"wiki": winner}, [routing, *governed])
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"), max_queue_size=1 << 16)
    )

    async def served(pipeline: Pipeline, names: tuple[str, ...]) -> None:
        ex = exchange(names)
        with tracing.server_span("tools/call", 1, ex.call.params, version="2026-07-28", transport="pipe") as span:
            tracing.note_reply(span, await pipeline.run(ex), "tools/call")

    async def per_call(run: Callable[[], Awaitable[None]], traced: bool) -> float:
        if traced:
            tracing.install(provider)
        try:
            for _ in range(50):
                await run()
            provider.force_flush()
            started = time.process_time()
            for _ in range(calls):
                await run()
            if traced:
                await anyio.to_thread.run_sync(provider.force_flush)
            return (time.process_time() - started) / calls * 1e6
        finally:
            tracing.uninstall()

    best: dict[str, float] = {}
    for _ in range(repeat):
        for key, pipeline, names in (
            ("routed", routed, ("down", "empty", "wiki")),
            ("single", single, ("wiki",)),
        ):
            for traced in (False, True):
                figure = await per_call(lambda p=pipeline, n=names: served(p, n), traced)
                column = f"{key} {'on' if traced else 'off'}"
                best[column] = min(best.get(column, figure), figure)
    provider.shutdown()
    await http.close()
    return best


def added(off: float, on: float) -> str:
    return f"off {off:7.1f} us  on {on:7.1f} us  ({on / off:.3f}x, {(on / off - 1) * 100:+.1f} %)"


async def main_async(options: argparse.Namespace) -> None:
    receiving, endpoint = child_server(LOOPBACK)
    answering, api = child_server(LOOPBACK)
    try:
        p50 = await stdio_p50(endpoint, options.calls, options.rounds)
        over_stdio = await served_cpu(endpoint, api, options.cpu_calls, options.rounds)
        cpu = await routed_cpu(endpoint, options.cpu_calls, options.repeat)
    finally:
        for process in (receiving, answering):
            process.terminate()
            process.wait(10)
    load = os.getloadavg()[0]
    print(f"tracing (load average {load:.2f}; two cores shared: read the ratios)")
    print(f"  plain stdio tools/call p50 ({options.calls} calls in {options.rounds} interleaved rounds per column):")
    for key in ("not installed", "off", "on"):
        print(f"    {key:<14} {p50[key]:7.3f} ms  ({p50[key] / p50['off']:.3f}x off)")
    print(f"  routed call over stdio, the serve process's CPU per call ({options.cpu_calls} calls):")
    print(f"    {'one provider, loopback HTTP':<32} {added(over_stdio['off'], over_stdio['on'])}")
    print(f"  routed call in process, CPU per call ({options.cpu_calls} calls, best of {options.repeat}):")
    for key in ("routed", "single"):
        label = "three providers, two fail over" if key == "routed" else "one provider"
        print(f"    {label:<32} {added(cpu[f'{key} off'], cpu[f'{key} on'])}")
    stdio_ratio = over_stdio["on"] / over_stdio["off"]
    for label, ratio in (
        ("over stdio", stdio_ratio),
        ("in process, failing over", cpu["routed on"] / cpu["routed off"]),
    ):
        verdict = "MET" if ratio <= 1.10 else "MISSED"
        print(f"  goal: tracing adds at most 10 % to a routed call's CPU, {label}: [{verdict}] {ratio:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cpu-calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    isolated_home()  # the proxies write ledger lines: into a temporary home
    asyncio.run(main_async(options))


if __name__ == "__main__":
    main()
