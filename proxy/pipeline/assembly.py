"""What sits between the transports and the providers, assembled in one visible place.

`assemble` returns the policies in the order the pipeline runs them, the proxy's own tools, the
size governor's engine (for the HTTP endpoint's governor routes) and, for `serve`, the routed
capabilities: the providers that are on (providers.registry) and one route per capability that
has any (`frugal__search`, `frugal__extract`, `frugal__browse`), and one route per
`[routes.NAME]` over its candidates (tools of upstreams, bound to links by the router). Every feature that hooks into a
tools/call (routing, the size governor, budgets, the loop guard, the ledger, metrics) is added
here and nowhere else:

    loop guard → domains → cache → routing → ceiling → budget → cooldown → governor → metrics
    → ledger → recent calls → (build_pipeline adds the call log; dispatch's deadline and retries come with it)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio
import anyio.abc
import anyio.to_thread

from frugal_proxy import home, ledger
from frugal_proxy.capabilities import CAPABILITIES, EXECUTE_TOOL, TOOLS
from frugal_proxy.config import (
    COOLDOWN_DEFAULT,
    CapabilityRouting,
    Config,
    GovernorSettings,
    ProviderConfig,
    format_duration,
    split_candidate,
)
from frugal_proxy.governor.engine import Governor
from frugal_proxy.governor.receipts import Signer
from frugal_proxy.ledger import feeds, replica
from frugal_proxy.ledger.line import timestamp
from frugal_proxy.ledger.writer import writer_for
from frugal_proxy.pipeline.dispatch import DispatchSettings
from frugal_proxy.policies import Policy
from frugal_proxy.policies.budget import Budget
from frugal_proxy.policies.ceiling import Ceiling
from frugal_proxy.policies.cooldown import Cooldown
from frugal_proxy.policies.domains import DomainPolicy
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.ledger import Ledger
from frugal_proxy.policies.loop_guard import LoopGuard
from frugal_proxy.policies.metrics import CallMetrics, CallSink, ToolNames
from frugal_proxy.policies.recent_calls import RecentCallsPolicy
from frugal_proxy.policies.result_cache import ResultCachePolicy
from frugal_proxy.policies.routing import Routing
from frugal_proxy.providers import Provider, registry
from frugal_proxy.providers.governor_tools import governor_tools
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.own_tools import OwnTool
from frugal_proxy.records import ProviderSpec, Route
from frugal_proxy.state.call_windows import CallWindows, MemoryCallWindows
from frugal_proxy.state.cooldowns import CooldownBook, MemoryCooldowns
from frugal_proxy.state.latency import MemoryLatency
from frugal_proxy.state.recent_calls import RecentCalls
from frugal_proxy.state.redis_budgets import RedisBudgets
from frugal_proxy.state.redis_cache import RedisResultCache
from frugal_proxy.state.redis_cooldowns import RedisCooldowns
from frugal_proxy.state.redis_link import RedisLink
from frugal_proxy.state.redis_replicas import RedisReplicas
from frugal_proxy.state.redis_spend import RedisSpend, RedisUsage
from frugal_proxy.state.redis_spill import RedisSpillStore
from frugal_proxy.state.redis_windows import RedisCallWindows
from frugal_proxy.state.result_cache import MemoryResultCache, ResultCache
from frugal_proxy.state.spend import MemorySpend, spend_key, utc_day
from frugal_proxy.state.spill import MemorySpillStore
from frugal_proxy.state.usage import MemoryUsage, utc_month

log = logging.getLogger("frugal_proxy.pipeline")


@dataclass
class Assembly:
    policies: list[Policy] = field(default_factory=list)
    own_tools: list[OwnTool] = field(default_factory=list)
    governor: Governor | None = None
    # The routed capabilities (serve): their providers, the routes that expose them, and the
    # providers served by upstream tools, which each router binds to its own links.
    providers: list[Provider] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    upstream_tools: list[tuple[ProviderSpec, ProviderConfig]] = field(default_factory=list)
    # The candidates of `[routes.NAME]` routes: (provider key, upstream, tool); each router binds
    # them to its own links, like the upstream tools above.
    candidates: list[tuple[str, str, str]] = field(default_factory=list)
    off: dict[str, str] = field(default_factory=dict)
    # The providers that are off per capability (name -> why): what the status page lists.
    off_by_capability: dict[str, dict[str, str]] = field(default_factory=dict)
    http: HttpClient | None = None
    feeds: Feeds | None = None
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)  # the deadline
    redis: RedisLink | None = None  # `[state] backend = "redis"`: the shared stores' connection
    # What /metrics reads at each scrape (serve): the daily caps and the cooldowns, and the tool
    # names its labels may carry (with metrics on: the routers' catalogs add what upstreams list).
    budget: Budget | None = None
    cooldown: Cooldown | None = None
    tool_names: ToolNames | None = None
    # What the status page reads (server.ui_data): the ring of recent calls the seal phase
    # feeds, and the routing policy whose order it shows.
    recent: RecentCalls = field(default_factory=RecentCalls)
    routing: Routing | None = None
    # With the shared Redis: this replica's check-in and the fleet it sees, for the status page
    # (server.ui_data.LiveSource.of starts its beat: only a serve checks in, never a test's pipeline).
    replicas: RedisReplicas | None = None

    @property
    def provider_names(self) -> list[str]:
        """The routed providers' names and the `[routes.NAME]` candidates' (`UPSTREAM.TOOL`):
        the names a cooldown fences, beside the upstreams' own."""
        specs = self.feeds.specs if self.feeds is not None else []
        return [spec.name for spec in specs] + [f"{upstream}.{tool}" for _, upstream, tool in self.candidates]

    @property
    def state(self) -> str | None:
        """`ok` or `degraded` with the Redis backend (/healthz, `status`); None with memory."""
        return self.redis.state if self.redis is not None else None

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start what providers keep running for the life of the process (a remote MCP server's
        shared connection); each has a `serve(task_status=...)`. Then rebuild what the usage
        ledger knows (today's spend, this month's billed calls, recent latencies) in the
        background, off the event loop: from the lines written before now, since the calls
        served meanwhile are counted live. Until it is done, a call that would reserve spend or
        a unit of free quota waits for it; every other call goes ahead."""
        if self.redis is not None:
            await task_group.start(self.redis.watch)  # the mirrors of the shared stores
        if self.feeds is not None and ledger.enabled(None):
            self.feeds.hold()
            task_group.start_soon(self.feeds.rebuild, timestamp(time.time()))
        for provider in self.providers:
            serve = getattr(provider, "serve", None)
            if serve is not None:
                await task_group.start(serve)

    async def aclose(self) -> None:
        """Release what the providers hold (the shared HTTP client, a browser, a remote MCP
        connection); the process is ending."""
        for provider in self.providers:
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
        if self.http is not None:
            await self.http.close()
        if self.redis is not None:
            await self.redis.aclose()


@dataclass
class Feeds:
    """The routing state the usage ledger can rebuild after a restart: the free-quota counts, the
    fast strategy's latency book and each provider's spend today."""

    usage: MemoryUsage | RedisUsage
    latency: MemoryLatency  # per replica: each measures its own path to the providers
    spend: MemorySpend | RedisSpend
    specs: list[ProviderSpec]

    def hold(self) -> None:
        """From now until `rebuild` is done, reservations of spend and free quota wait."""
        self.spend.seeding.hold()
        self.usage.seeding.hold()

    async def rebuild(self, before: str) -> None:
        """Add what the ledger holds from before `before` (a ledger timestamp: when this process
        started serving) to the live counters. A ledger that cannot be read is a warning: the
        counters then start from zero."""
        now = time.time()
        day, month = utc_day(now), utc_month(now)
        names = {spec.name for spec in self.specs}
        today: dict[str, int] = {}
        billed: dict[str, int] = {}
        recent: dict[str, list[float]] = {}
        try:
            today, billed, recent = await anyio.to_thread.run_sync(self._read, day, month, names, now, before)
        except (OSError, ValueError) as error:  # msgspec's DecodeError is a ValueError
            log.warning(
                "the usage ledger could not be read: today's spend and this month's free quotas start from zero",
                extra={"error": str(error), "directory": str(home.usage_dir())},
            )
        finally:  # read, failed or cancelled: the waiting reservations go ahead
            with anyio.CancelScope(shield=True):
                await _seed(self.spend, today, day)
                await _seed(self.usage, billed, month)
        for provider, latencies in recent.items():
            for latency in latencies:
                self.latency.observe(provider, latency)

    @staticmethod
    def _read(
        day: str, month: str, names: set[str], now: float, before: str
    ) -> tuple[dict[str, int], dict[str, int], dict[str, list[float]]]:
        return (
            feeds.spend_on(day, before=before),
            feeds.billed_calls(month, before=before),
            feeds.served_latencies(names, now=now, before=before),
        )


async def _seed(
    store: MemorySpend | MemoryUsage | RedisSpend | RedisUsage, counts: dict[str, int], period: str
) -> None:
    """Hand the ledger's figures to a store: a memory one adds them; a Redis one only when no
    replica has yet (Redis holds the day or month: it wins over the ledger)."""
    if isinstance(store, RedisSpend | RedisUsage):
        await store.seed_period(counts, period)
    else:
        store.seed(counts, period)


def candidate_key(candidate: str) -> str:
    """A `[routes.NAME]` candidate's key in a pipeline's providers (`routes/a.search`): apart
    from the upstreams' own keys and from the routed capabilities'."""
    return f"routes/{candidate}"


def provider_key(spec: ProviderSpec) -> str:
    """A routed provider's key in a pipeline's providers: `search/serper`, apart from the plain
    tools' providers, which are keyed by their upstream's name (a provider may share a name with
    the upstream that serves it). Receipts and routing rules use `spec.name`."""
    return f"{spec.capability}/{spec.name}"


def assemble(
    governor: GovernorSettings | None = None,
    metrics: CallSink | None = None,
    *,
    config: Config | None = None,
    environ: Mapping[str, str] | None = None,
    http: HttpClient | None = None,
) -> Assembly:
    """The embedded default: the size governor (on unless `enabled = false`) with its in-memory
    spill store and its own tools, then the call metrics when there is somewhere to put them
    (the HTTP endpoint's `/metrics`), last so that they see what every other policy decided,
    and the usage ledger beside them. With a `config` (serve), the routed capabilities and the
    routing policy before them."""
    settings = governor or (config.governor if config is not None else GovernorSettings())
    assembly = Assembly()
    if config is not None:
        _add_routed(assembly, config, environ, http or HttpClient())
    if settings.enabled:
        engine = _governor(settings, assembly.redis, config, environ)  # each operator may lower its own budgets
        assembly.governor = engine
        assembly.policies.append(GovernorPolicy(engine, config.limits.max_chars if config is not None else 0))
        assembly.own_tools.extend(governor_tools(engine))
    if metrics is not None:
        defined = [route.name for route in assembly.routes] + [tool.name for tool in assembly.own_tools]
        if any(route.capability for route in assembly.routes):
            defined.append(EXECUTE_TOOL["name"])
        assembly.tool_names = ToolNames(defined)
        assembly.policies.append(CallMetrics(metrics, assembly.tool_names))
    if ledger.enabled(environ):  # the usage ledger, unless FRUGAL_STATS=off
        rack = registry.rack_rates(config) if config is not None else {}
        assembly.policies.append(Ledger(writer_for(home.usage_dir(), replica.replica_id(environ)), rack))
    # The status page's last calls, after the money's record: a view never costs the ledger a line.
    assembly.policies.append(RecentCallsPolicy(assembly.recent))
    return assembly


def _add_routed(assembly: Assembly, config: Config, environ: Mapping[str, str] | None, http: HttpClient) -> None:
    enabled = registry.enable(config, environ, http)
    assembly.http = http
    assembly.providers = enabled.providers
    assembly.upstream_tools = enabled.upstream_tools
    assembly.off = enabled.off
    assembly.off_by_capability = _off_by_capability(config, enabled.off, enabled.providers)
    assembly.dispatch = DispatchSettings(deadline=config.limits.routed_timeout_seconds, retries=config.limits.retries)
    specs = [provider.spec for provider in enabled.providers] + [spec for spec, _ in enabled.upstream_tools]
    for capability in CAPABILITIES:
        names = tuple(provider_key(spec) for spec in specs if spec.capability == capability)
        if names:
            tool = TOOLS[capability]
            assembly.routes.append(Route(tool["name"], names, tool["outputSchema"], capability=capability))
    known = registry.provider_names(config)
    routing: dict[str, CapabilityRouting] = {
        name: _by_own_names(getattr(config.routing, name), known[name]) for name in CAPABILITIES
    }
    for name, tool_route in config.routes.items():  # one tool served by several upstreams' tools
        assembly.routes.append(Route(name, tuple(candidate_key(c) for c in tool_route.candidates)))
        for candidate in tool_route.candidates:
            split = split_candidate(candidate, config.upstreams)
            assert split is not None  # checked when the config was read
            if all(key != candidate_key(candidate) for key, _, _ in assembly.candidates):
                assembly.candidates.append((candidate_key(candidate), *split))
    by_route = {name: tool_route.routing for name, tool_route in config.routes.items()}
    _say_denied(routing, specs)
    link = assembly.redis = _redis(config, environ)
    if link is not None:  # one of a fleet: it checks in, and the status page lists the others
        assembly.replicas = RedisReplicas(link, replica.replica_id(environ))
    usage: MemoryUsage | RedisUsage
    spend: MemorySpend | RedisSpend
    if link is None:
        usage, spend = MemoryUsage(time.time), MemorySpend(time.time)
    else:  # after a flush, the first replica to notice adds what the ledger says
        usage = RedisUsage(link, time.time, _ledger_rebuild(feeds.billed_calls, environ))
        spend = RedisSpend(link, time.time, _ledger_rebuild(feeds.spend_on, environ))
    latency = MemoryLatency()
    assembly.feeds = Feeds(usage, latency, spend, specs)
    # A [routes.NAME] candidate is its upstream's tool: it keeps that upstream's loop guard and URL arguments.
    owner = {name: name for name in config.upstreams} | {key: upstream for key, upstream, _ in assembly.candidates}
    watched = [key for key, name in owner.items() if config.upstreams[name].loop_guard]
    urls = {key: config.upstreams[name].url_arguments for key, name in owner.items()}
    window = config.routing.loop_window_seconds
    domains = config.routing.domains.rules
    budget = assembly.budget = Budget(_daily_caps(config), spend)
    ordering = assembly.routing = Routing(routing, usage, latency, by_route, names=known, off=enabled.off)
    cooldown = assembly.cooldown = Cooldown(_cooldown(config), _cooldowns(link))
    assembly.policies += [
        LoopGuard(config.routing.loop_limit, window, _windows(link), upstreams=watched),  # admit
        # admit: URLs (a plain tool's names resolved, under rules that refuse addresses); after a search: its results
        *([DomainPolicy(domains, urls, resolver=http.resolver)] if domains.active else []),
        *([_cache(config, link)] if config.cache.enabled else []),  # admit: a hit answers; seal: keeps answers
        ordering,  # route: order, deny, pin
        Ceiling(usage),  # route: max_cost_usd
        budget,  # route, dispatch: daily_budget_usd
        cooldown,  # route, dispatch: fenced off after a 429
    ]


def _say_denied(routing: Mapping[str, CapabilityRouting], specs: list[ProviderSpec]) -> None:
    """Say once, at start, which providers that are on a `deny` keeps from every call: a choice
    of the config, so a call's log and reason do not repeat it (its `skipped[]` still lists it)."""
    for capability, settings in routing.items():
        denied = [spec.name for spec in specs if spec.capability == capability and spec.name in settings.deny]
        if denied:
            log.info(f"routing.{capability}.deny: never called", extra={"providers": ", ".join(denied)})


def _off_by_capability(config: Config, off: Mapping[str, str], on: list[Provider]) -> dict[str, dict[str, str]]:
    """`off` (by name) under each capability whose built-ins or tables carry the name, less
    the ones that are on there (a name may be on in one capability and off in another)."""
    found: dict[str, dict[str, str]] = {}
    for capability in CAPABILITIES:
        names = [b.name for b in registry.built_ins() if b.capability == capability]
        names += list(config.providers_of(capability))
        serving = {provider.spec.name for provider in on if provider.spec.capability == capability}
        found[capability] = {name: off[name] for name in dict.fromkeys(names) if name in off and name not in serving}
    return found


def _by_own_names(settings: CapabilityRouting, names: Mapping[str, str]) -> CapabilityRouting:
    """A capability's `order` and `deny` by the providers' own names (`goreadability` is
    `readability`); a name that is none was refused when the config was read."""
    return CapabilityRouting(
        settings.strategy,
        [names.get(name, name) for name in settings.order],
        [names.get(name, name) for name in settings.deny],
    )


def _daily_caps(config: Config) -> dict[str, int]:
    """`daily_budget_usd` of each provider table, keyed as the budget keys spend (a built-in
    configured under an alias counts under its own name)."""
    names = {
        (builtin.capability, alias): builtin.name
        for builtin in registry.built_ins()
        for alias in (builtin.name, *builtin.aliases)
    }
    caps: dict[str, int] = {}
    for capability in CAPABILITIES:
        for name, options in config.providers_of(capability).items():
            cap = options.daily_budget_micros
            if cap is not None:
                caps[spend_key(capability, names.get((capability, name), name))] = cap
    return caps


def _redis(config: Config, environ: Mapping[str, str] | None) -> RedisLink | None:
    """The shared stores' connection for `[state] backend = "redis"`, else None (memory)."""
    state = config.state
    if state.backend != "redis":
        return None
    url, password = state.redis_url(dict(environ) if environ is not None else None)
    return RedisLink(
        url,
        prefix=state.prefix,
        password=password,
        pool_size=state.pool_size,
        connect_timeout=state.connect_timeout_seconds,
        timeout=state.timeout_seconds,
    )


def _ledger_rebuild(
    read: Callable[..., dict[str, int]], environ: Mapping[str, str] | None
) -> Callable[[str], Awaitable[dict[str, int]]]:
    """What the ledger says was counted in a day or month until now, read off the event loop:
    how a Redis store that lost its figures (flushed, restarted empty) gets them back."""

    async def rebuild(period: str) -> dict[str, int]:
        if not ledger.enabled(environ):
            return {}
        before = timestamp(time.time())
        try:
            return await anyio.to_thread.run_sync(lambda: read(period, before=before))
        except (OSError, ValueError) as error:
            log.warning(
                "the usage ledger could not be read: shared counters start from zero", extra={"error": str(error)}
            )
            return {}

    return rebuild


def _governor(
    settings: GovernorSettings, link: RedisLink | None, config: Config | None, environ: Mapping[str, str] | None
) -> Governor:
    """The size governor; on the Redis backend its spill store and the operators' own budgets
    are shared by the fleet (an artifact that cannot go there stays on this replica, which its
    receipts then name)."""
    signer = Signer(environ=environ)
    if link is None or config is None:
        return Governor(settings, MemorySpillStore(settings.spill_quota_bytes), signer)
    store = RedisSpillStore(
        link, replica.replica_id(environ), settings.spill_quota_bytes, max_bytes=config.state.spill_max_bytes
    )
    return Governor(settings, store, signer, RedisBudgets(link))


def _windows(link: RedisLink | None) -> CallWindows:
    return MemoryCallWindows() if link is None else RedisCallWindows(link)


def _cooldowns(link: RedisLink | None) -> CooldownBook:
    return MemoryCooldowns() if link is None else RedisCooldowns(link)


def _cache(config: Config, link: RedisLink | None) -> ResultCachePolicy:
    store: ResultCache
    if link is None:
        store = MemoryResultCache(config.cache.max_entries)
    else:
        store = RedisResultCache(link, config.cache.max_entries)
    return ResultCachePolicy(config.cache, store)


def _cooldown(config: Config) -> float:
    window = config.routing.cooldown_seconds
    if window is None:
        log.warning(
            "routing.cooldown is not a duration; using the default",
            extra={"value": config.routing.cooldown, "default": format_duration(COOLDOWN_DEFAULT)},
        )
        return COOLDOWN_DEFAULT
    return window
