"""The call metrics policy on the real pipeline and the real governor, with fake providers."""

from __future__ import annotations

import pytest

from frugal_proxy.capabilities import SearchHit
from frugal_proxy.config import CacheSettings, GovernorSettings
from frugal_proxy.governor.engine import Governor
from frugal_proxy.pipeline.assembly import Assembly
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies import Policy
from frugal_proxy.policies.budget import Budget
from frugal_proxy.policies.cooldown import Cooldown
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.loop_guard import LoopGuard
from frugal_proxy.policies.metrics import MAX_TOOL_LABELS, OTHER_TOOL, CallMetrics, ToolNames
from frugal_proxy.policies.result_cache import ResultCachePolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Exchange, Outcome, Route
from frugal_proxy.server.metrics import Metrics
from frugal_proxy.state.call_windows import MemoryCallWindows
from frugal_proxy.state.cooldowns import MemoryCooldowns
from frugal_proxy.state.result_cache import MemoryResultCache
from frugal_proxy.state.spend import MemorySpend, utc_day
from tests.fake_clock import Clock
from tests.routed_calls import search

pytestmark = pytest.mark.anyio


def exchange(tool: str, *providers: str, arguments: object = None) -> Exchange:
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw(arguments or {})}
    return Exchange(call=Call(request_id=1, tool=tool, params=params), route=Route(tool, providers))


def answering(body: object | None = None, *, error: bool = False) -> FakeProvider:
    async def handler(ex: Exchange) -> Outcome:
        if error:
            return Outcome("ok", reply=jsonrpc.error(None, jsonrpc.INVALID_PARAMS, "Unknown tool"))
        return Outcome("ok", reply=jsonrpc.result(None, body))

    return FakeProvider("up", handler)


def failing(kind: str) -> FakeProvider:
    async def handler(ex: Exchange) -> Outcome:
        return Outcome(kind, message="upstream 'up' is down")  # type: ignore[arg-type]

    return FakeProvider("up", handler)


def calls(metrics: Metrics, tool: str, provider: str, outcome: str) -> float | None:
    labels = {"tool": tool, "provider": provider, "outcome": outcome}
    return metrics.registry.get_sample_value("frugal_calls_total", labels)


@pytest.mark.parametrize(
    ("provider", "outcome"),
    [
        (answering({"content": [{"type": "text", "text": "5"}], "isError": False}), "ok"),
        (answering({"content": [{"type": "text", "text": "no such note"}], "isError": True}), "tool_error"),
        (answering({"resultType": "input_required", "inputRequests": {}}), "input_required"),
        (answering(error=True), "rpc_error"),
        (failing("transient"), "transient"),
        (failing("rate_limited"), "rate_limited"),
    ],
)
async def test_each_outcome_is_counted_once_with_its_labels(provider: FakeProvider, outcome: str) -> None:
    metrics = Metrics()
    pipeline = build_pipeline({"up": provider}, [CallMetrics(metrics, ToolNames(["add"]))])
    await pipeline.run(exchange("add", "up"))
    assert calls(metrics, "add", "up", outcome) == 1.0
    assert metrics.registry.get_sample_value("frugal_call_duration_seconds_count", {"tool": "add"}) == 1.0
    everything = [s for f in metrics.registry.collect() if f.name == "frugal_calls" for s in f.samples]
    assert len(everything) == 1


async def test_no_provider_left_is_its_own_outcome() -> None:
    class DropAll(Policy):
        def route(self, exchange: Exchange) -> None:
            exchange.candidates.clear()

    metrics = Metrics()
    pipeline = build_pipeline({"up": answering({"content": []})}, [DropAll(), CallMetrics(metrics, ToolNames(["add"]))])
    await pipeline.run(exchange("add", "up"))
    assert calls(metrics, "add", "none", "no_provider") == 1.0


async def test_governor_cuts_and_repeat_denials_are_counted() -> None:
    metrics = Metrics()
    governor = Governor.embedded(GovernorSettings(max_bytes=1024))
    big = {"content": [{"type": "text", "text": "line of text\n" * 2000}]}
    policies = [GovernorPolicy(governor), CallMetrics(metrics, ToolNames(["dump"]))]
    pipeline = build_pipeline({"up": answering(big)}, policies)
    first = exchange("dump", "up", arguments={"path": "/srv/data"})
    answer = await pipeline.run(first)
    removed = len(jsonrpc.raw(big)) - len(answer["result"])
    assert removed > 0
    assert metrics.registry.get_sample_value("frugal_governor_shaped_total", {"tool": "dump"}) == 1.0
    assert metrics.registry.get_sample_value("frugal_governor_removed_bytes_total", {"tool": "dump"}) == removed
    assert calls(metrics, "dump", "up", "ok") == 1.0
    # The same call again is refused at admission while the spill lives.
    await pipeline.run(exchange("dump", "up", arguments={"path": "/srv/data"}))
    assert calls(metrics, "dump", "none", "denied") == 1.0
    assert metrics.registry.get_sample_value("frugal_governor_shaped_total", {"tool": "dump"}) == 1.0


def test_tool_labels_are_bounded() -> None:
    names = ToolNames(["notes__read_note", "tool with spaces", "x" * 129])
    assert names.label("notes__read_note") == "notes__read_note"
    assert names.label("tool with spaces") == OTHER_TOOL
    assert names.label("x" * 129, served=True) == OTHER_TOOL
    names.learn(f"tool_{number}" for number in range(MAX_TOOL_LABELS))
    assert len(names.known) == MAX_TOOL_LABELS
    assert names.label("one_too_many", served=True) == OTHER_TOOL
    assert names.label("tool_7") == "tool_7"
    assert names.label("notes__read_note") == "notes__read_note"


async def test_a_name_is_a_label_only_once_known_as_a_tool() -> None:
    """A made-up name that the upstream refuses stays `(other)`, whatever it looks like; a name
    the upstream served (called before any tools/list) is learnt; a listed one is kept."""
    metrics = Metrics()
    names = ToolNames(["listed"])
    refusing = answering({"content": [{"type": "text", "text": "Unknown tool"}], "isError": True})
    pipeline = build_pipeline({"up": refusing}, [CallMetrics(metrics, names)])
    for made_up in ("sk_live_secret_name", "another_made_up", "listed"):
        await pipeline.run(exchange(made_up, "up"))
    assert calls(metrics, OTHER_TOOL, "up", "tool_error") == 2.0
    assert calls(metrics, "listed", "up", "tool_error") == 1.0
    serving = build_pipeline({"up": answering({"content": []})}, [CallMetrics(metrics, names)])
    await serving.run(exchange("served_first", "up"))
    assert calls(metrics, "served_first", "up", "ok") == 1.0
    assert "served_first" in names.known
    assert "sk_live_secret_name" not in metrics.exposition()[0].decode()


async def test_attempts_failovers_and_spend_are_counted_exactly() -> None:
    """A rate-limited free provider, then a paid one that answers: two attempts, one failover
    from the first, and the paid one's price as spend, in micro-dollars."""

    async def limited(ex: Exchange) -> Outcome:
        return Outcome("rate_limited", message="429", retry_after=30)

    async def found(ex: Exchange) -> Outcome:
        return Outcome("ok", reply=jsonrpc.result(None, {"content": []}))

    metrics = Metrics()
    providers = {"free": FakeProvider("free", limited), "paid": FakeProvider("paid", found, price_micros=8_001)}
    pipeline = build_pipeline(providers, [CallMetrics(metrics, ToolNames(["lookup"]))])
    for _ in range(3):
        await pipeline.run(exchange("lookup", "free", "paid"))
    value = metrics.registry.get_sample_value
    assert (
        value("frugal_provider_attempts_total", {"capability": "tool", "provider": "free", "outcome": "rate_limited"})
        == 3
    )
    assert value("frugal_provider_attempts_total", {"capability": "tool", "provider": "paid", "outcome": "ok"}) == 3
    assert value("frugal_failovers_total", {"tool": "lookup", "provider": "free"}) == 3
    assert value("frugal_failovers_total", {"tool": "lookup", "provider": "paid"}) is None
    assert metrics.spend == {("tool", "paid"): 24_003}
    assert value("frugal_provider_spend_microdollars_total", {"capability": "tool", "provider": "paid"}) == 24_003
    assert value("frugal_provider_attempt_duration_seconds_count", {"capability": "tool", "provider": "free"}) == 3
    assert calls(metrics, "lookup", "paid", "ok") == 3


async def test_cache_lookups_and_loop_guard_refusals_are_counted() -> None:
    """A search, the same again (a hit), a third time (the loop guard's limit is 2), a plain
    tool (the cache is not asked): one miss, one hit, one refusal; the hit is `cached`."""
    clock = Clock()
    metrics = Metrics()
    policies = [
        LoopGuard(2, 60.0, MemoryCallWindows(), clock),
        ResultCachePolicy(CacheSettings(enabled=True), MemoryResultCache(8, clock), clock),
        CallMetrics(metrics, ToolNames(["frugal__search", "add"])),
    ]
    hits = [SearchHit("MCP", "https://modelcontextprotocol.io/", "s", "p")]

    async def found(ex: Exchange) -> Outcome:
        return Outcome("ok", data=hits)

    providers = {"p": FakeProvider("p", found, capability="search"), "up": answering({"content": []})}
    pipeline = build_pipeline(providers, policies)
    for _ in range(3):
        await pipeline.run(search("p"))
    await pipeline.run(exchange("add", "up"))
    value = metrics.registry.get_sample_value
    assert metrics.cache == {("search", False): 1, ("search", True): 1}
    assert value("frugal_cache_hits_total", {"capability": "search"}) == 1
    assert value("frugal_cache_misses_total", {"capability": "search"}) == 1
    assert value("frugal_loop_guard_refusals_total", {"tool": "frugal__search"}) == 1
    assert calls(metrics, "frugal__search", "p", "cached") == 1
    assert calls(metrics, "frugal__search", "none", "denied") == 1
    assert calls(metrics, "add", "up", "ok") == 1


async def test_budgets_and_cooldowns_are_read_at_scrape_time() -> None:
    """The gauges come from the policies' own books as they are when scraped."""
    clock = Clock()
    spend = MemorySpend(clock)
    spend.seed({"search/paid": 7_000}, utc_day(clock()))
    cooldowns = MemoryCooldowns()
    assembly = Assembly(budget=Budget({"search/paid": 10_000}, spend, clock), cooldown=Cooldown(60.0, cooldowns, clock))
    assembly.candidates.append(("routes/up.tool", "up", "tool"))
    metrics = Metrics()
    metrics.watch([], assembly)
    value = metrics.registry.get_sample_value
    assert value("frugal_budget_limit_microdollars", {"capability": "search", "provider": "paid"}) == 10_000
    assert value("frugal_budget_remaining_microdollars", {"capability": "search", "provider": "paid"}) == 3_000
    assert value("frugal_provider_cooling_down", {"provider": "up.tool"}) == 0
    await cooldowns.fence("up.tool", clock() + 42.0)
    assert value("frugal_provider_cooling_down", {"provider": "up.tool"}) == 1
    assert value("frugal_provider_cooldown_remaining_seconds", {"provider": "up.tool"}) == 42.0
    clock.now += 50
    assert value("frugal_provider_cooling_down", {"provider": "up.tool"}) == 0
    assert value("frugal_provider_cooldown_remaining_seconds", {"provider": "up.tool"}) == 0
