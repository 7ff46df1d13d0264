"""What the routing layer costs per call, in-process: a routed `frugal__search` through the whole
pipeline (routing policy, dispatch, the routed answer and its receipt, the size governor, the
call log) against the same provider called directly, both reaching a Web API answered by an
httpx2 MockTransport (so the network does not blur the figure).

    direct   Wikipedia(setup).call(exchange): the driver alone (request, classify, decode, hits)
    routed   Pipeline.run(exchange): everything a routed call goes through, with three providers
             configured (the first two fail over quickly: one 503, one with zero hits)
    single   Pipeline.run with the winning provider alone: the layer's cost without failover
    guarded  single with every guard on, as `assemble` builds them from one config: the loop
             guard, the domain policy (deny_private and a deny list, over the URL-free search
             and its five results), the ceiling, a daily budget (the provider priced at one
             micro-dollar, so each call reserves and settles), the cooldown, the deadline,
             retries and the result cache; each call a different query, as a loop-free agent
             makes them (so the cache misses and keeps each answer)
    plain    a plain upstream tool (no price, no budget) through the same guarded assembly,
             against its provider called directly: what the guards cost a call they do not
             govern (the budget and free-quota hooks should not run for it at all)

It reports CPU time per call (process time, so a busy machine weighs less) and the routed and
single columns as added microseconds over direct and as a ratio; the targets are an added 0.3 ms
of CPU per call for the routing layer (issue: routed tools) and 0.1 ms more for the guards
(issue: guardrails). Nothing leaves the process.

    .venv/bin/python bench/route_bench.py [--calls 2000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Awaitable, Callable

import anyio
import httpx2

from frugal_proxy import config
from frugal_proxy.capabilities import TOOLS, request_of
from frugal_proxy.config import CapabilityRouting, GovernorSettings, ProviderConfig
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
from frugal_proxy.policies.routing import Routing
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider, wikipedia
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.registry import Setup
from frugal_proxy.records import Call, Exchange, Outcome, ProviderSpec, Route
from frugal_proxy.state.latency import MemoryLatency
from frugal_proxy.state.usage import MemoryUsage

from rpc_client import isolated_home

PAGES = {
    "pages": [
        {"id": n, "key": f"Page_{n}", "title": f"Page {n}", "excerpt": f'a <span class="searchmatch">hit</span> {n}'}
        for n in range(5)
    ]
}
BODY = json.dumps(PAGES).encode()
ARGUMENTS = {"query": "hit", "max_results": 5}
GUARDED = """
[search_providers.wikipedia]
cost_per_call = 0.000001
daily_budget_usd = 1000
[routing]
loop_limit = 5
[routing.domains]
deny_private = true
deny = ["ads.example", "tracker.example"]
[limits]
call_timeout = "60s"
retries = 2
[cache]
enabled = true
"""


def answer(request: httpx2.Request) -> httpx2.Response:
    if request.url.host == "down.example":
        return httpx2.Response(503)
    if request.url.host == "empty.example":
        return httpx2.Response(200, content=b'{"pages": []}')
    return httpx2.Response(200, content=BODY, headers={"content-type": "application/json"})


def driver(name: str, host: str, http: HttpClient) -> wikipedia.Wikipedia:
    spec = ProviderSpec(name, "search")
    return wikipedia.Wikipedia(Setup(spec, f"https://{host}", None, 15.0, http, ProviderConfig(), {}))


def exchange(names: tuple[str, ...], arguments: dict[str, object] = ARGUMENTS) -> Exchange:
    params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw(arguments)}
    route = Route("frugal__search", names, TOOLS["search"]["outputSchema"], capability="search")
    ex = Exchange(Call(1, "frugal__search", params), route)
    ex.request = request_of("search", dict(arguments))
    return ex


def guarded_pipeline(http: HttpClient) -> tuple[Pipeline, Callable[[], Exchange]]:
    """The winning driver, priced at one micro-dollar, behind every guard `assemble` builds."""
    spec = ProviderSpec("wikipedia", "search", 1)
    paid = wikipedia.Wikipedia(Setup(spec, "https://wiki.example", None, 15.0, http, ProviderConfig(), {}))
    assembly = assemble(config=config.loads(GUARDED), environ={})
    pipeline = build_pipeline({"wikipedia": paid}, assembly.policies, assembly.dispatch)
    queries = itertools.count()

    def fresh() -> Exchange:
        return exchange(("wikipedia",), {**ARGUMENTS, "query": f"hit {next(queries)}", "max_cost_usd": "0.01"})

    return pipeline, fresh


def plain_pipeline() -> tuple[FakeProvider, Pipeline, Callable[[], Exchange]]:
    """A plain tool of an upstream (free, no budget) and the guarded assembly around it."""
    reply = jsonrpc.result(1, jsonrpc.raw({"content": [{"type": "text", "text": "pong"}]}))

    async def pong(ex: Exchange) -> Outcome:
        return Outcome("ok", reply=reply)

    upstream = FakeProvider("up", pong)
    assembly = assemble(config=config.loads(GUARDED), environ={})
    pipeline = build_pipeline({"up": upstream}, assembly.policies, assembly.dispatch)
    params = {"name": jsonrpc.raw("up__ping"), "arguments": jsonrpc.raw({})}

    def fresh() -> Exchange:
        return Exchange(Call(1, "up__ping", params), Route("up__ping", ("up",)))

    return upstream, pipeline, fresh


async def per_call(calls: int, run: Callable[[], Awaitable[object]]) -> float:
    """CPU microseconds per call."""
    for _ in range(50):
        await run()
    started = time.process_time()
    for _ in range(calls):
        await run()
    return (time.process_time() - started) / calls * 1e6


async def main_async(calls: int, repeat: int) -> None:
    http = HttpClient(transport=httpx2.MockTransport(answer))
    winner = driver("wiki", "wiki.example", http)
    providers = {
        "down": driver("down", "down.example", http),
        "empty": driver("empty", "empty.example", http),
        "wiki": winner,
    }
    routing = Routing({"search": CapabilityRouting(order=["down", "empty"])}, MemoryUsage(time.time), MemoryLatency())
    governed = assemble(GovernorSettings())
    routed = build_pipeline(providers, [routing, *governed.policies])
    single = build_pipeline({"wiki": winner}, [routing, *governed.policies])
    guarded, fresh = guarded_pipeline(http)
    upstream, plain, fresh_plain = plain_pipeline()
    best: dict[str, float] = {}
    for _ in range(repeat):
        figures = {
            "direct": await per_call(calls, lambda: winner.call(exchange(("wiki",)))),
            "routed": await per_call(calls, lambda: routed.run(exchange(("down", "empty", "wiki")))),
            "single": await per_call(calls, lambda: single.run(exchange(("wiki",)))),
            "guarded": await per_call(calls, lambda: guarded.run(fresh())),
            "plain direct": await per_call(calls, lambda: upstream.call(fresh_plain())),
            "plain": await per_call(calls, lambda: plain.run(fresh_plain())),
        }
        for key, value in figures.items():
            best[key] = min(best.get(key, value), value)
    await http.close()
    direct = best["direct"]
    print(f"routing layer, CPU per call ({calls} calls, best of {repeat}):")
    print(f"  direct (the driver alone)                 {direct:8.1f} us")
    for key, label in (("single", "one provider, through the pipeline"), ("routed", "three providers, two fail over")):
        added = best[key] - direct
        print(f"  {label:<41} {best[key]:8.1f} us  (+{added:.1f} us, {best[key] / direct:.2f}x direct)")
    guards = best["guarded"] - best["single"]
    print(f"  {'one provider, every guard on':<41} {best['guarded']:8.1f} us  (+{guards:.1f} us over unguarded)")
    plain_added = best["plain"] - best["plain direct"]
    print(f"  {'a plain tool, direct':<41} {best['plain direct']:8.1f} us")
    print(
        f"  {'a plain tool, every guard on':<41} {best['plain']:8.1f} us  "
        f"(+{plain_added:.1f} us, {best['plain'] / best['plain direct']:.2f}x direct)"
    )
    print("  target: the routing layer adds under 300 us of CPU per call (one provider)")
    verdict = "MET" if best["single"] - direct < 300 else "MISSED"
    print(f"  [{verdict}] added {best['single'] - direct:.1f} us with one provider")
    print("  target: every guard on adds under 100 us of CPU per call")
    print(f"  [{'MET' if guards < 100 else 'MISSED'}] the guards added {guards:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    isolated_home()  # the guarded assembly writes ledger lines: into a temporary home
    anyio.run(main_async, options.calls, options.repeat)


if __name__ == "__main__":
    main()
