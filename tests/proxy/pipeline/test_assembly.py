"""assemble(): which policies run and in what order, the governor on or off, the metrics sink
last, the governor's own tools present and bound to the exposed engine; and on `[state] backend
= "redis"`, against a real redis-server, the Redis round trips of each pipeline phase counted on
the wire: at most one per phase on a routed call (the phase's commands in one pipeline or one
script), none on a plain call that no guard takes part in."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from frugal_proxy import config as config_module
from frugal_proxy.capabilities import SearchHit
from frugal_proxy.config import GovernorSettings
from frugal_proxy.ledger.line import encode, timestamp
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
from frugal_proxy.policies import Policy
from frugal_proxy.policies.call_log import CallLog
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.ledger import Ledger
from frugal_proxy.policies.metrics import CallMetrics
from frugal_proxy.policies.recent_calls import RecentCallsPolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.providers.own_tools import OwnToolProvider
from frugal_proxy.records import Attempt, Call, Exchange, Outcome, Route
from tests.ledger_lines import usage_line
from tests.pace import deadline, paced
from tests.redis_server import RedisServer, Wire, redis_server
from tests.routed_calls import search

__all__ = ["redis_server"]
pytestmark = pytest.mark.anyio

GOVERNOR_TOOLS = ["frugal__fetch_slice", "frugal__verify_receipt", "frugal__shape_result"]


class Sink:
    """A CallSink that keeps what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.shaped: list[tuple[str, int]] = []
        self.attempts: list[Attempt] = []
        self.failovers: list[tuple[str, str]] = []
        self.cache: list[tuple[str, bool]] = []
        self.loop_refusals: list[str] = []

    def record_call(self, tool: str, provider: str, outcome: str, seconds: float) -> None:
        self.calls.append((tool, provider, outcome))

    def record_shaped(self, tool: str, removed_bytes: int) -> None:
        self.shaped.append((tool, removed_bytes))

    def record_attempt(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)

    def record_failover(self, tool: str, provider: str) -> None:
        self.failovers.append((tool, provider))

    def record_cache(self, capability: str, hit: bool) -> None:
        self.cache.append((capability, hit))

    def record_loop_refusal(self, tool: str) -> None:
        self.loop_refusals.append(tool)


def exchange(tool: str, provider: str) -> Exchange:
    return Exchange(call=Call(1, tool, {"name": jsonrpc.raw(tool)}), route=Route(tool, (provider,)))


async def large(exchange: Exchange) -> Outcome:
    return Outcome("ok", reply=jsonrpc.result(None, {"content": [{"type": "text", "text": "word " * 20_000}]}))


def test_the_default_is_the_governor_with_its_tools_and_no_metrics() -> None:
    assembly = assemble()
    policy, ledger, recent = assembly.policies  # the money's line before the page's ring
    assert isinstance(policy, GovernorPolicy) and policy.governor is assembly.governor
    assert isinstance(recent, RecentCallsPolicy) and recent.book is assembly.recent  # the status page's ring
    assert isinstance(ledger, Ledger)
    assert [tool.name for tool in assembly.own_tools] == GOVERNOR_TOOLS


def test_settings_reach_the_exposed_governor() -> None:
    settings = GovernorSettings(max_bytes=4096)
    assembly = assemble(settings)
    assert assembly.governor is not None and assembly.governor.settings is settings
    assert assembly.governor.budget("local", "any").max_bytes == 4096


def test_a_disabled_governor_is_left_out_with_its_tools() -> None:
    assembly = assemble(GovernorSettings(enabled=False), environ={"FRUGAL_STATS": "off"})
    assert [type(policy) for policy in assembly.policies] == [RecentCallsPolicy]
    assert (assembly.own_tools, assembly.governor) == ([], None)
    sink = Sink()
    metrics, recent = assemble(GovernorSettings(enabled=False), metrics=sink, environ={"FRUGAL_STATS": "off"}).policies
    assert isinstance(metrics, CallMetrics) and isinstance(recent, RecentCallsPolicy)


async def test_metrics_come_last_and_see_what_the_governor_cut() -> None:
    sink = Sink()
    assembly = assemble(metrics=sink)
    pipeline = build_pipeline({"up": FakeProvider("up", large)}, assembly.policies)
    assert [type(policy) for policy in pipeline.policies] == [
        GovernorPolicy,
        CallMetrics,
        Ledger,
        RecentCallsPolicy,
        CallLog,
    ]
    with deadline(10):
        answer = await pipeline.run(exchange("read", "up"))
    assert "frugal__fetch_slice" in jsonrpc.decode_any(answer["result"])["content"][0]["text"]
    assert sink.calls == [("read", "up", "ok")]
    ((tool, removed),) = sink.shaped
    assert tool == "read" and removed > 0


async def test_the_governor_tools_share_the_exposed_governors_store() -> None:
    assembly = assemble()
    assert assembly.governor is not None
    own = OwnToolProvider(assembly.own_tools)
    shape = exchange("frugal__shape_result", "frugal")
    shape.call = Call(1, "frugal__shape_result", {"arguments": jsonrpc.raw({"route": "r", "text": "word " * 20_000})})
    with deadline(10):
        outcome = await own.call(shape)
        assert outcome.reply is not None
        report: dict[str, Any] = jsonrpc.decode_any(outcome.reply["result"])["structuredContent"]
        (receipt,) = report["receipts"]
        artifact = await assembly.governor.store.get("local", receipt["artifact_id"])
    assert artifact.payload == ("word " * 20_000).encode()


def test_a_routed_tool_is_listed_only_while_a_provider_of_its_capability_is_on() -> None:
    from frugal_proxy import config
    from frugal_proxy.providers import registry

    off = "".join(
        f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
        for builtin in registry.built_ins()
        if builtin.name != "wikipedia"
    )
    assembly = assemble(config=config.loads(off), environ={})
    routed = {route.name for route in assembly.routes if route.capability is not None}
    assert routed == {"frugal__search"}
    assembly = assemble(config=config.loads(off + "[search_providers.wikipedia]\nenabled = false\n"), environ={})
    assert [route.name for route in assembly.routes if route.capability is not None] == []


def test_a_deny_of_providers_that_are_on_is_said_once_at_start(caplog: pytest.LogCaptureFixture) -> None:
    from frugal_proxy import config

    text = '[routing.search]\ndeny = ["youcom-free", "serper"]\n'  # serper is off: no key
    with caplog.at_level(logging.INFO, logger="frugal_proxy.pipeline"):
        assemble(config=config.loads(text), environ={})
    denied = [r for r in caplog.records if r.getMessage() == "routing.search.deny: never called"]
    assert [(r.levelno, r.__dict__["providers"]) for r in denied] == [(logging.INFO, "youcom-free")]


def test_the_domain_policy_gets_each_upstreams_url_arguments() -> None:
    from frugal_proxy import config
    from frugal_proxy.policies.domains import DomainPolicy

    text = (
        '[upstreams.fetch]\ncommand = ["fetch-server"]\nurl_arguments = ["url", "href"]\n'
        '[upstreams.notes]\ncommand = ["notes-server"]\n[routing.domains]\ndeny_private = true\n'
    )
    assembly = assemble(config=config.loads(text), environ={})
    (domains,) = [policy for policy in assembly.policies if isinstance(policy, DomainPolicy)]
    assert domains.url_arguments == {"fetch": frozenset({"url", "href"})}
    assert domains.resolver is not None  # deny_private: a plain tool's host names are resolved and checked


def test_an_invalid_cooldown_warns_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    from frugal_proxy import config
    from frugal_proxy.policies.cooldown import Cooldown

    with caplog.at_level(logging.WARNING, logger="frugal_proxy.pipeline"):
        assembly = assemble(config=config.loads('[routing]\ncooldown = "a while"'), environ={})
    (cooldown,) = [policy for policy in assembly.policies if isinstance(policy, Cooldown)]
    assert cooldown.window == 60.0
    (line,) = caplog.records
    assert line.getMessage() == "routing.cooldown is not a duration; using the default"
    assert line.__dict__["value"] == "a while" and line.__dict__["default"] == "1m0s"


def test_daily_caps_are_keyed_by_capability_and_provider() -> None:
    from frugal_proxy import config
    from frugal_proxy.policies.budget import Budget

    loaded = config.loads(
        '[upstreams.tools]\ncommand = ["x"]\n[search_providers.wikipedia]\ndaily_budget_usd = 1.5\n'
        '[extract_providers.reader]\nupstream = "tools"\ntool = "read"\ndaily_budget_usd = 0.01'
    )
    (budget,) = [policy for policy in assemble(config=loaded, environ={}).policies if isinstance(policy, Budget)]
    assert budget.caps == {"search/wikipedia": 1_500_000, "extract/reader": 10_000}


def test_routing_reserves_free_quota_before_the_ceiling_and_the_budget_look_at_it() -> None:
    """The ceiling and the daily budget read `Exchange.free_quota` in their before_call hooks:
    routing, which reserves the unit, must run its hook first (dispatch runs them in order)."""
    from frugal_proxy import config
    from frugal_proxy.policies.budget import Budget
    from frugal_proxy.policies.ceiling import Ceiling
    from frugal_proxy.policies.routing import Routing

    loaded = config.loads("[search_providers.wikipedia]\ndaily_budget_usd = 1.5\n")
    kinds = [type(policy) for policy in assemble(config=loaded, environ={}).policies]
    assert kinds.index(Routing) < kinds.index(Ceiling) and kinds.index(Routing) < kinds.index(Budget)


async def test_several_guards_on_one_call_as_the_trace_shows_them() -> None:
    """Every guard assembled from one config, on one search: the ceiling skips youcom, serper's
    daily budget is spent, marginalia cools down after a 429, wikipedia answers with one result
    on a private host that the domain policy drops; and the same call a third time is refused."""
    from frugal_proxy import config
    from frugal_proxy.capabilities import SearchHit, SearchRequest
    from frugal_proxy.policies.budget import Budget
    from frugal_proxy.policies.cooldown import Cooldown

    loaded = config.loads(
        '[upstreams.tools]\ncommand = ["x"]\n'
        '[search_providers.serper]\nupstream = "tools"\ntool = "serper"\ncost_per_call = 0.001\n'
        "daily_budget_usd = 0.001\n"
        '[search_providers.youcom]\nupstream = "tools"\ntool = "you"\ncost_per_call = 0.005\n'
        "[routing]\nloop_limit = 2\n[routing.domains]\ndeny_private = true\n"
    )
    assembly = assemble(config=loaded, environ={})

    async def busy(ex: Exchange) -> Outcome:
        return Outcome("rate_limited", message="marginalia is rate-limiting (429)", retry_after=120.0)

    async def found(ex: Exchange) -> Outcome:
        hits = [SearchHit("MCP", "https://modelcontextprotocol.io/", "s", "wikipedia")]
        return Outcome("ok", data=[*hits, SearchHit("admin", "http://192.168.0.1/", "s", "wikipedia")])

    names = ("marginalia", "wikipedia", "serper", "youcom")
    prices = {"serper": 1_000, "youcom": 5_000}
    providers = {
        name: FakeProvider(name, busy if name == "marginalia" else found, prices.get(name, 0), capability="search")
        for name in names
    }
    pipeline = build_pipeline(providers, assembly.policies, assembly.dispatch)
    (budget,) = [p for p in assembly.policies if isinstance(p, Budget)]
    (cooldown,) = [p for p in assembly.policies if isinstance(p, Cooldown)]
    await budget.book.reserve("search/serper", 1_000, 1_000)  # spent earlier today

    def call() -> Exchange:
        arguments = {"query": "mcp", "max_cost_usd": "0.001"}
        params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw(arguments)}
        ex = Exchange(Call(1, "frugal__search", params), Route("frugal__search", names, capability="search"))
        ex.request = SearchRequest("mcp", max_cost_usd=Decimal("0.001"))
        return ex

    with deadline(5):
        await pipeline.run(call())  # marginalia answers 429: fenced for its Retry-After
        assert cooldown.book.until("marginalia") is not None
        answer = await pipeline.run(call())
        refused = await pipeline.run(call())
    body = jsonrpc.decode_any(answer["result"])["structuredContent"]
    resets = body["skipped"][1]["why"].rpartition("in ")[2]
    assert body["reason"] == (
        "policy=cheap: effective cost ascending; "
        "ceiling: skipped youcom (youcom costs $0.0050 per call, above max_cost_usd $0.0010); "
        f"budget: skipped serper (it has spent $0.0010 of its $0.0010 daily budget; resets at 00:00 UTC, in {resets}; "
        "cooldown: skipped marginalia (rate-limited; cooling down for another 2m0s); "
        "provider=wikipedia won on attempt 1"
    )
    assert [(s["provider"], s["guard"]) for s in body["skipped"]] == [
        ("youcom", "ceiling"),
        ("serper", "budget"),
        ("marginalia", "cooldown"),
    ]
    assert [hit["url"] for hit in body["results"]] == ["https://modelcontextprotocol.io/"]
    assert body["warnings"] == ["1 result(s) from wikipedia dropped: routing.domains refuses their hosts"]
    assert body["cost_usd"] == 0 and body["total_cost_usd"] == 0
    text = jsonrpc.decode_any(refused["result"])["content"][0]["text"]
    assert text.startswith("frugal__search: loop guard: this exact frugal__search call has been made 3 times")


async def test_serve_rebuilds_spend_quotas_and_latencies_from_the_ledger(frugal_home: Path) -> None:
    """After a restart the day's spend, the month's billed calls and recent latencies come back
    from the usage ledger, read off the event loop once serve starts; a reservation made before
    the read is done waits for it, so the cap already holds for the first call."""
    now = time.time()
    earlier = max(now - 1.0, now // 86_400 * 86_400)  # today, before this process started
    usage = frugal_home / "usage"
    usage.mkdir(parents=True)
    line = usage_line(
        ts=timestamp(earlier), provider="wikipedia", billed={"wikipedia": 0.003}, served_ms={"wikipedia": 80.0}
    )
    # A line stamped after the start stands for a call this process serves itself: it is counted
    # live (its reservation), so the rebuild must not count it again.
    served_here = usage_line(ts=timestamp(now + 5.0), provider="wikipedia", billed={"wikipedia": 0.003})
    (usage / f"{timestamp(now)[:7]}.jsonl").write_bytes(encode(line) * 2 + encode(served_here))
    # Only providers that keep nothing running: start returns before the rebuild has begun, so the
    # reservation below would go ahead on an empty counter if it did not wait.
    only_wikipedia = "".join(
        f"[search_providers.{name}]\nenabled = false\n" for name in ("youcom-free", "marginalia", "searxng")
    )
    config = config_module.loads(
        "[search_providers.wikipedia]\ncost_per_call = 0.003\ndaily_budget_usd = 0.006\n" + only_wikipedia,
        environ={},
    )
    assembly = assemble(config=config, environ={})
    assert assembly.feeds is not None
    assert not any(hasattr(provider, "serve") for provider in assembly.providers)
    spend = assembly.feeds.spend
    async with anyio.create_task_group() as tg:
        await assembly.start(tg)
        with deadline(10):
            assert await spend.reserve("search/wikipedia", 3_000, 6_000) is None  # waited: $0.006 spent
        tg.cancel_scope.cancel()  # what the providers keep running (serve cancels it at shutdown)
    assert spend.spent("search/wikipedia") == 6_000  # the two lines from before, not the third
    assert assembly.feeds.usage.calls_this_month("wikipedia") == 2
    assert assembly.feeds.latency.estimate("wikipedia") == (80.0, 2)
    await assembly.aclose()


async def test_an_unreadable_ledger_is_a_warning_and_the_counters_start_from_zero(
    frugal_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    month = frugal_home / "usage" / f"{timestamp(time.time())[:7]}.jsonl"
    month.mkdir(parents=True)  # a directory where the month's file should be: reading it fails
    config = config_module.loads("[search_providers.wikipedia]\ncost_per_call = 0.003\n", environ={})
    assembly = assemble(config=config, environ={})
    assert assembly.feeds is not None
    with caplog.at_level(logging.WARNING, "frugal_proxy.pipeline"):
        async with anyio.create_task_group() as tg:
            await assembly.start(tg)
            with deadline(10):
                assert await assembly.feeds.spend.reserve("search/wikipedia", 3_000, 6_000) is not None
            tg.cancel_scope.cancel()
    assert "the usage ledger could not be read" in caplog.text
    assert assembly.feeds.usage.calls_this_month("wikipedia") == 0
    await assembly.aclose()


async def test_a_routed_call_waits_for_the_ledger_rebuild_no_longer_than_its_deadline() -> None:
    """While serve still reads the usage ledger after a restart, a capped provider's reservation
    waits for it, but a routed call gives up at its deadline with an error that says why, having
    reserved and billed nothing; once the read is done the next call is served."""
    from frugal_proxy.capabilities import SearchHit, SearchRequest

    config = config_module.loads(
        '[limits]\ncall_timeout = "300ms"\n'
        "[search_providers.wikipedia]\ncost_per_call = 0.003\ndaily_budget_usd = 0.006\n"
        + "".join(f"[search_providers.{name}]\nenabled = false\n" for name in ("youcom-free", "marginalia", "searxng")),
        environ={},
    )
    assembly = assemble(config=config, environ={})
    assert assembly.feeds is not None
    calls: list[str] = []

    async def found(ex: Exchange) -> Outcome:
        calls.append(ex.call.tool)
        return Outcome("ok", data=[SearchHit("MCP", "https://modelcontextprotocol.io/", "s", "wikipedia")])

    providers = {"wikipedia": FakeProvider("wikipedia", found, 3_000, capability="search")}
    pipeline = build_pipeline(providers, assembly.policies, assembly.dispatch)

    def call() -> Exchange:
        params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw({"query": "mcp"})}
        ex = Exchange(Call(1, "frugal__search", params), Route("frugal__search", ["wikipedia"], capability="search"))
        ex.request = SearchRequest("mcp")
        return ex

    assembly.feeds.hold()  # the rebuild has begun and does not end by itself here
    started = time.monotonic()
    with deadline(5):
        answer = await pipeline.run(call())
    assert 0.3 <= time.monotonic() - started < paced(3)  # the call's deadline, not the test's (paced 5)
    result = jsonrpc.decode_any(answer["result"])
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "call deadline exceeded" in text and "usage ledger from before the restart was still being read" in text
    assert calls == [] and assembly.feeds.spend.spent("search/wikipedia") == 0
    assembly.feeds.spend.seed({}, "")
    assembly.feeds.usage.seed({}, "")
    with deadline(5):
        served = await pipeline.run(call())
    assert not jsonrpc.decode_any(served["result"]).get("isError")
    assert calls == ["frugal__search"] and assembly.feeds.spend.spent("search/wikipedia") == 3_000
    await assembly.aclose()


async def test_a_tool_route_over_upstream_tools_keeps_their_url_arguments_and_loop_guard() -> None:
    """`[routes.NAME]` serves the tools of upstreams under a name of its own: the domain policy
    checks the URL arguments its candidates' upstreams list, and the loop guard watches it when
    they opted in, as for the tools under their own names."""
    from frugal_proxy import config
    from frugal_proxy.policies.domains import DomainPolicy
    from frugal_proxy.policies.loop_guard import LoopGuard
    from frugal_proxy.protocol import jsonrpc
    from frugal_proxy.records import Call, Exchange

    text = (
        '[upstreams.fetch]\ncommand = ["fetch-server"]\nurl_arguments = ["url"]\nloop_guard = true\n'
        '[upstreams.mirror]\ncommand = ["mirror-server"]\n'
        '[routes.get]\ncandidates = ["mirror.get", "fetch.fetch"]\n'
        "[routing.domains]\ndeny_private = true\n"
    )
    assembly = assemble(config=config.loads(text), environ={})
    (route,) = [route for route in assembly.routes if route.name == "get"]
    (domains,) = [policy for policy in assembly.policies if isinstance(policy, DomainPolicy)]
    (guard,) = [policy for policy in assembly.policies if isinstance(policy, LoopGuard)]
    params = {"name": jsonrpc.raw("get"), "arguments": jsonrpc.raw({"url": "http://10.0.0.5/admin"})}
    exchange = Exchange(Call(1, "get", params), route)
    await domains.admit(exchange)
    assert exchange.answer is not None
    assert (
        "10.0.0.5 is a private (RFC 1918) address"
        in jsonrpc.decode_any(exchange.answer["result"])["content"][0]["text"]
    )
    assert guard.fingerprint(exchange) is not None


# Every guard that keeps state: the loop guard, the cache, a daily cap, a free quota, cooldowns.
GUARDS = """
[search_providers.wikipedia]
cost_per_call = "0.003"
daily_budget_usd = "10"
[search_providers.serper]
cost_per_call = "0.001"
daily_budget_usd = "10"
free_quota_monthly = 2
[routing]
loop_limit = 5
[cache]
enabled = true
"""


class PhaseMarks(Policy):
    """First in the pipeline: notes how many round trips were made when the seal phase starts."""

    name = "marks"

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.sealing: list[int] = []

    async def seal(self, exchange: Exchange) -> None:
        self.sealing.append(len(self.wire.writes))


def hits(exchange: Exchange) -> Outcome:
    query = getattr(exchange.request, "query", "")
    return Outcome("ok", data=[SearchHit(f"about {query}", "https://example.org/a", "a snippet", "fake")])


@asynccontextmanager
async def assembled(server: RedisServer) -> AsyncIterator[tuple[Pipeline, Phases]]:
    """Every guard of GUARDS on Redis, over fake providers; the round trips counted on the wire."""
    wire = Wire()
    state = f'[state]\nbackend = "redis"\nurl = "{server.url}"\ntimeout = "5s"\nconnect_timeout = "5s"\n'
    assembly = assemble(config=config_module.loads(GUARDS + state), environ={"FRUGAL_STATS": "off"})
    assert assembly.redis is not None
    wire.counting(assembly.redis)

    async def answer(exchange: Exchange) -> Outcome:
        return hits(exchange)

    async def pong(exchange: Exchange) -> Outcome:
        return Outcome("ok", reply=jsonrpc.result(1, jsonrpc.raw({"content": [{"type": "text", "text": "pong"}]})))

    providers = {
        "wikipedia": FakeProvider("wikipedia", answer, 3000, capability="search"),
        "serper": FakeProvider("serper", answer, 1000, capability="search", free_quota_monthly=2),
        "up": FakeProvider("up", pong),
    }
    marks = PhaseMarks(wire)
    pipeline = build_pipeline(providers, [marks, *assembly.policies], assembly.dispatch)
    async with anyio.create_task_group() as tg:
        await assembly.start(tg)  # the watcher subscribed and the mirrors loaded
        try:
            yield pipeline, Phases(wire, marks)
        finally:
            await assembly.aclose()
            tg.cancel_scope.cancel()


def searching(query: str, *names: str) -> Exchange:
    exchange = search(*names)
    exchange.request = type(exchange.request)(query)  # type: ignore[misc]
    return exchange


def plain() -> Exchange:
    params = {"name": jsonrpc.raw("up__ping"), "arguments": jsonrpc.raw({})}
    return Exchange(Call(1, "up__ping", params), Route("up__ping", ("up",)))


class Phases:
    """The round trips of one call, phase by phase."""

    def __init__(self, wire: Wire, marks: PhaseMarks) -> None:
        self.wire, self.marks = wire, marks

    async def of(self, pipeline: Pipeline, exchange: Exchange) -> dict[str, list[list[bytes]]]:
        start = len(self.wire.writes)
        await pipeline.open(exchange)  # admit, then route (which reads only the mirrors)
        admitted = len(self.wire.writes)
        sealed_before = len(self.marks.sealing)
        await pipeline.proceed(exchange)  # dispatch, govern, seal
        sealing = self.marks.sealing[-1] if len(self.marks.sealing) > sealed_before else len(self.wire.writes)
        writes = self.wire.writes
        return {
            "admit+route": writes[start:admitted],
            "dispatch+govern": writes[admitted:sealing],
            "seal": writes[sealing:],
        }


@pytest.mark.timeout(60)
async def test_a_routed_call_makes_at_most_one_redis_round_trip_per_phase(
    redis_server: RedisServer,
) -> None:
    with deadline(30):
        async with assembled(redis_server) as (pipeline, phases):
            await phases.of(pipeline, searching("warm up", "wikipedia"))  # the day's hash seeded
            missed = await phases.of(pipeline, searching("proxy", "wikipedia"))
            hit = await phases.of(pipeline, searching("proxy", "wikipedia"))
            quota = [await phases.of(pipeline, searching(f"quota {n}", "serper")) for n in range(3)]
    # A miss: the loop guard's script and the cache's GET in one pipeline; the reservation; the put.
    assert [len(writes) for writes in missed.values()] == [1, 1, 1], missed
    assert sorted(missed["admit+route"][0]) == [b"EVALSHA", b"GET"], missed
    assert missed["dispatch+govern"] == [[b"EVALSHA"]] and missed["seal"] == [[b"EVALSHA"]], missed
    # A hit answers at admission: nothing reserved, nothing stored.
    assert [len(writes) for writes in hit.values()] == [1, 0, 0], hit
    # A unit of free quota reserved (the budget has nothing to reserve then), and once the two
    # units are used, the price reserved against the cap: one script either way.
    assert [[len(writes) for writes in call.values()] for call in quota] == [[1, 1, 1]] * 3, quota


@pytest.mark.timeout(60)
async def test_a_plain_call_with_no_guard_taking_part_makes_no_redis_round_trip(
    redis_server: RedisServer,
) -> None:
    with deadline(30):
        async with assembled(redis_server) as (pipeline, phases):
            calls = [await phases.of(pipeline, plain()) for _ in range(5)]
    assert all(not writes for call in calls for writes in call.values()), calls


def test_the_shared_redis_brings_the_replicas_check_in_and_memory_none(redis_server: RedisServer) -> None:
    """The one place naming concrete stores builds the fleet's check-in too (the HTTP and stdio
    serves read it off the assembly)."""
    from frugal_proxy.state.redis_replicas import RedisReplicas

    state = f'[state]\nbackend = "redis"\nurl = "{redis_server.url}"\n'
    environ = {"FRUGAL_STATS": "off", "FRUGAL_REPLICA_ID": "replica-7"}
    shared = assemble(config=config_module.loads(GUARDS + state), environ=environ)
    assert isinstance(shared.replicas, RedisReplicas) and shared.replicas.link is shared.redis
    assert shared.replicas.replica == "replica-7"
    assert assemble(config=config_module.loads(GUARDS), environ=environ).replicas is None
