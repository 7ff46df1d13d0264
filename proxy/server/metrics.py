"""Prometheus metrics for the HTTP endpoint's `GET /metrics`.

    Metrics         the tallies of one served endpoint and a `CollectorRegistry` of its own
                    (never prometheus_client's global one); the `record_*` methods (the
                    pipeline's CallSink) and `count_request` are the hot-path entries; `watch`
                    names what is read at scrape time (upstreams, budgets, cooldowns, root sets)
    HttpMetrics     ASGI middleware outside everything else: every HTTP request by method, route
                    path and status, the guard's refusals (401, 403, 429) included
    scrape_handler  the starlette handler for `GET /metrics` (Prometheus text format, or
                    OpenMetrics when the scraper asks for it)

The families (docs/metrics.md says what each counts):

    frugal_calls_total{tool,provider,outcome}                       counter
    frugal_call_duration_seconds{tool}                              histogram
    frugal_provider_attempts_total{capability,provider,outcome}     counter
    frugal_provider_attempt_duration_seconds{capability,provider}   histogram
    frugal_provider_retries_total{capability,provider}              counter
    frugal_provider_spend_microdollars_total{capability,provider}   counter
    frugal_failovers_total{tool,provider}                           counter
    frugal_budget_limit_microdollars{capability,provider}           gauge, at scrape time
    frugal_budget_remaining_microdollars{capability,provider}       gauge, at scrape time
    frugal_provider_cooling_down{provider}                          gauge, at scrape time
    frugal_provider_cooldown_remaining_seconds{provider}            gauge, at scrape time
    frugal_cache_hits_total{capability}, frugal_cache_misses_total  counters
    frugal_loop_guard_refusals_total{tool}                          counter
    frugal_governor_shaped_total{tool}                              counter
    frugal_governor_removed_bytes_total{tool}                       counter
    frugal_upstream_up{upstream}                                    gauge, at scrape time
    frugal_upstream_starts_total{upstream}                          counter, at scrape time
    frugal_upstream_restarts_total{upstream}                        counter, at scrape time
    frugal_upstream_root_set_connections{upstream}                  gauge, at scrape time
    frugal_http_requests_total{method,path,status}                  counter

The hot path adds to plain dicts keyed by label values (no lock, no metric objects): it and the
scrape both run on the event loop's one thread, and the collector turns the tallies into metric
families only when scraped. prometheus_client itself (a few hundred milliseconds of imports) is
loaded by the first scrape, not at start-up.

Every label value is bounded and carries nothing a client sent beyond a known tool name: `tool`
comes labelled by the pipeline (policies.metrics.ToolNames: a tool the proxy knows, else
`(other)`); `capability`, `provider` and `upstream` come from the configuration; `outcome` from
a closed set; `method` is one of `METHODS` or `other`, `path` one of the app's route paths or
`other`. Arguments, results, tokens, session ids and client addresses never reach a label.
"""

from __future__ import annotations

import bisect
import importlib
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from frugal_proxy.server.connections import RESPONDED_KEY
from frugal_proxy.upstream.base import UpstreamBase

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from frugal_proxy.pipeline.assembly import Assembly
    from frugal_proxy.records import Attempt

METRICS_PATH = "/metrics"
METHODS = frozenset({"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"})
OTHER = "other"
# From a cache hit to a call that runs into `limits.call_timeout` (5 minutes by default).
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_BUCKET_NAMES = [*(repr(bound) for bound in CALL_BUCKETS), "+Inf"]


class Durations:
    """One tool's latency histogram: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(CALL_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        # A bucket counts the values up to and including its bound; the last one is +Inf.
        self.counts[bisect.bisect_left(CALL_BUCKETS, seconds)] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        running, buckets = 0, []
        for name, count in zip(_BUCKET_NAMES, self.counts, strict=True):
            running += count
            buckets.append((name, float(running)))
        return buckets


class RootSetHolder(Protocol):
    """What the root-set gauge reads of a link (bridge.link.UpstreamLink)."""

    @property
    def name(self) -> str: ...

    @property
    def root_sets(self) -> Sized | None: ...


Pair = tuple[str, str]  # (capability, provider)


class Metrics:
    """What one served endpoint counts, and the registry `/metrics` exposes it from."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str, str], int] = {}
        self.durations: dict[str, Durations] = {}
        self.attempts: dict[tuple[str, str, str], int] = {}
        self.attempt_durations: dict[Pair, Durations] = {}
        self.retries: dict[Pair, int] = {}
        self.spend: dict[Pair, int] = {}  # micro-dollars: integers, exact
        self.failovers: dict[tuple[str, str], int] = {}
        self.cache: dict[tuple[str, bool], int] = {}
        self.loop_refusals: dict[str, int] = {}
        self.shaped: dict[str, int] = {}
        self.removed_bytes: dict[str, int] = {}
        self.requests: dict[tuple[str, str, int], int] = {}
        self.connections: list[UpstreamBase] = []
        self.links: list[RootSetHolder] = []
        self.assembly: Assembly | None = None
        self._registry: CollectorRegistry | None = None

    def watch(
        self,
        connections: Sequence[UpstreamBase],
        assembly: Assembly | None = None,
        links: Sequence[RootSetHolder] = (),
    ) -> None:
        """Report, at every scrape, these upstream connections' state, the assembly's daily caps
        and cooldowns, and the links' connections per root set."""
        self.connections = list(connections)
        self.assembly = assembly if assembly is not None else self.assembly
        self.links = list(links) or self.links

    # -- the hot path (policies.metrics.CallSink) ----------------------------------------------------

    def record_call(self, tool: str, provider: str, outcome: str, seconds: float) -> None:
        """One finished tools/call (the tool by its label)."""
        key = (tool, provider, outcome)
        self.calls[key] = self.calls.get(key, 0) + 1
        durations = self.durations.get(tool)
        if durations is None:
            durations = self.durations[tool] = Durations()
        durations.observe(seconds)

    def record_attempt(self, attempt: Attempt) -> None:
        """One provider tried (its retries included), what it made of it and what it billed."""
        pair = (attempt.capability, attempt.provider)
        key = (*pair, attempt.outcome)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        durations = self.attempt_durations.get(pair)
        if durations is None:
            durations = self.attempt_durations[pair] = Durations()
        durations.observe(attempt.latency_ms / 1000)
        if attempt.retries:
            self.retries[pair] = self.retries.get(pair, 0) + attempt.retries
        if attempt.cost_micros:
            self.spend[pair] = self.spend.get(pair, 0) + attempt.cost_micros

    def record_failover(self, tool: str, provider: str) -> None:
        """A call moved on from `provider`, which failed, to its next candidate."""
        key = (tool, provider)
        self.failovers[key] = self.failovers.get(key, 0) + 1

    def record_cache(self, capability: str, hit: bool) -> None:
        """One lookup of the result cache."""
        key = (capability, hit)
        self.cache[key] = self.cache.get(key, 0) + 1

    def record_loop_refusal(self, tool: str) -> None:
        """One call the loop guard refused."""
        self.loop_refusals[tool] = self.loop_refusals.get(tool, 0) + 1

    def record_shaped(self, tool: str, removed_bytes: int) -> None:
        """One result the governor cut, and by how many bytes."""
        self.shaped[tool] = self.shaped.get(tool, 0) + 1
        self.removed_bytes[tool] = self.removed_bytes.get(tool, 0) + max(0, removed_bytes)

    def count_request(self, method: str, path: str, status: int) -> None:
        """One answered HTTP request (method and path already bounded by HttpMetrics)."""
        key = (method, path, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    # -- the scrape --------------------------------------------------------------------------------

    @property
    def registry(self) -> CollectorRegistry:
        """A registry of this endpoint's own, holding only these metrics."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(self)
        return self._registry

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry in the format the `Accept` header asks for, and its content type."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def describe(self) -> Iterator[Metric]:
        """The families, empty (the registry checks their names once, at registration)."""
        return iter(self._families().values())

    def collect(self) -> Iterator[Metric]:
        """The families with every tally as it is now."""
        families = self._families()
        self._fill(families)
        return iter(families.values())

    def _families(self) -> dict[str, Any]:
        """Every family, empty (each a prometheus_client MetricFamily: `add_metric` fills it)."""
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}
        return {name: kinds[kind](name, text, labels=labels) for name, (kind, labels, text) in FAMILIES.items()}

    def _fill(self, families: dict[str, Any]) -> None:
        def add(name: str, tallies: dict[Any, int]) -> None:
            family = families[name]
            for labels, count in tallies.items():
                family.add_metric(list(labels) if isinstance(labels, tuple) else [labels], count)

        add("frugal_calls", self.calls)
        for tool, histogram in self.durations.items():
            families["frugal_call_duration_seconds"].add_metric([tool], histogram.cumulative(), histogram.total)
        add("frugal_provider_attempts", self.attempts)
        for pair, histogram in self.attempt_durations.items():
            families["frugal_provider_attempt_duration_seconds"].add_metric(
                list(pair), histogram.cumulative(), histogram.total
            )
        add("frugal_provider_retries", self.retries)
        add("frugal_provider_spend_microdollars", self.spend)
        add("frugal_failovers", self.failovers)
        add("frugal_cache_hits", {capability: n for (capability, hit), n in self.cache.items() if hit})
        add("frugal_cache_misses", {capability: n for (capability, hit), n in self.cache.items() if not hit})
        add("frugal_loop_guard_refusals", self.loop_refusals)
        add("frugal_governor_shaped", self.shaped)
        add("frugal_governor_removed_bytes", self.removed_bytes)
        add("frugal_http_requests", {(m, p, str(status)): n for (m, p, status), n in self.requests.items()})
        self._fill_state(families)

    def _fill_state(self, families: dict[str, Any]) -> None:
        """The gauges read at scrape time: upstreams, root sets, daily caps, cooldowns."""
        for connection in self.connections:
            name = connection.name
            families["frugal_upstream_up"].add_metric([name], 1.0 if connection.running else 0.0)
            families["frugal_upstream_starts"].add_metric([name], connection.generation)
            restarts = max(0, connection.generation - 1)
            families["frugal_upstream_restarts"].add_metric([name], restarts)
        for link in self.links:
            held = link.root_sets
            if held is not None:
                families["frugal_upstream_root_set_connections"].add_metric([link.name], len(held))
        assembly = self.assembly
        if assembly is None:
            return
        if assembly.budget is not None:
            for key, cap, spent in assembly.budget.standing():
                labels = list(key.split("/", 1))
                families["frugal_budget_limit_microdollars"].add_metric(labels, cap)
                families["frugal_budget_remaining_microdollars"].add_metric(labels, max(0, cap - spent))
        if assembly.cooldown is not None:
            names = dict.fromkeys([*assembly.provider_names, *(c.name for c in self.connections)])
            for name, left in assembly.cooldown.remaining(names).items():
                families["frugal_provider_cooling_down"].add_metric([name], 1.0 if left > 0 else 0.0)
                families["frugal_provider_cooldown_remaining_seconds"].add_metric([name], round(left, 3))


# name (without `_total`) -> (type, labels, help): the HELP lines docs/metrics.md expands on.
FAMILIES: dict[str, tuple[str, list[str], str]] = {
    "frugal_calls": (
        "counter",
        ["tool", "provider", "outcome"],
        "tools/call requests finished by the pipeline, by exposed tool, provider and outcome.",
    ),
    "frugal_call_duration_seconds": (
        "histogram",
        ["tool"],
        "Time from a tools/call's admission to its sealed answer, governor included.",
    ),
    "frugal_provider_attempts": (
        "counter",
        ["capability", "provider", "outcome"],
        "Providers tried (an attempt's retries included), by what each attempt came to.",
    ),
    "frugal_provider_attempt_duration_seconds": (
        "histogram",
        ["capability", "provider"],
        "Time one provider attempt took, its retries included.",
    ),
    "frugal_provider_retries": (
        "counter",
        ["capability", "provider"],
        "Times dispatch tried a free provider again after a transient error.",
    ),
    "frugal_provider_spend_microdollars": (
        "counter",
        ["capability", "provider"],
        "What provider attempts billed, in micro-dollars (maybe-billed attempts included).",
    ),
    "frugal_failovers": (
        "counter",
        ["tool", "provider"],
        "Times a call moved on from a provider that failed (the provider label) to its next candidate.",
    ),
    "frugal_budget_limit_microdollars": (
        "gauge",
        ["capability", "provider"],
        "A provider's daily_budget_usd, in micro-dollars.",
    ),
    "frugal_budget_remaining_microdollars": (
        "gauge",
        ["capability", "provider"],
        "What is left of a provider's daily budget this UTC day, in micro-dollars.",
    ),
    "frugal_provider_cooling_down": (
        "gauge",
        ["provider"],
        "1 while a provider (or a plain tool's upstream) is fenced off after a rate limit, else 0.",
    ),
    "frugal_provider_cooldown_remaining_seconds": (
        "gauge",
        ["provider"],
        "Seconds left of a provider's cooldown (0 when it has none).",
    ),
    "frugal_cache_hits": ("counter", ["capability"], "Routed calls the result cache answered."),
    "frugal_cache_misses": ("counter", ["capability"], "Result cache lookups that found no answer."),
    "frugal_loop_guard_refusals": (
        "counter",
        ["tool"],
        "Calls the loop guard refused (the same call too often in routing.loop_window).",
    ),
    "frugal_governor_shaped": ("counter", ["tool"], "tools/call results the size governor cut to fit their budget."),
    "frugal_governor_removed_bytes": (
        "counter",
        ["tool"],
        "Bytes the size governor took out of results (spilled, recoverable with frugal__fetch_slice).",
    ),
    "frugal_upstream_up": (
        "gauge",
        ["upstream"],
        "1 while the upstream connection is up and negotiated, 0 while it is down or not started.",
    ),
    "frugal_upstream_starts": (
        "counter",
        ["upstream"],
        "Times the upstream connection was started: 1 plus its restarts (reconnects for a URL).",
    ),
    "frugal_upstream_restarts": (
        "counter",
        ["upstream"],
        "Times the upstream connection was started again after its first start.",
    ),
    "frugal_upstream_root_set_connections": (
        "gauge",
        ["upstream"],
        "Connections to a session-era upstream held for 2026-07-28 clients' distinct root sets.",
    ),
    "frugal_http_requests": (
        "counter",
        ["method", "path", "status"],
        "HTTP requests answered, by method, route path and status.",
    ),
}


def exported_names() -> set[str]:
    """Every sample name /metrics can carry (`_total` on counters; histograms' three series)."""
    names: set[str] = set()
    for name, (kind, _, _) in FAMILIES.items():
        if kind == "counter":
            names.add(f"{name}_total")
        elif kind == "histogram":
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
        else:
            names.add(name)
    return names


class HttpMetrics:
    """ASGI middleware counting every HTTP request by method, route path and status; a path
    that is not one of `paths` (the app's routes) counts as `other`."""

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: Iterable[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.paths = frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        async def counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            # A response written whole by the connection (RESPOND_HOOK) noted its status in the
            # scope instead. An app that fails before answering gets uvicorn's 500: count it as that.
            status = status or scope.get(RESPONDED_KEY, 0)
            method, path = scope["method"], scope["path"]
            self.metrics.count_request(
                method if method in METHODS else OTHER, path if path in self.paths else OTHER, status or 500
            )


def scrape_handler(metrics: Metrics) -> Callable[[Request], Awaitable[Response]]:
    """The handler of `GET /metrics`."""

    async def scrape(request: Request) -> Response:
        if "prometheus_client.exposition" not in sys.modules:
            # The first scrape imports prometheus_client (a few hundred ms): off the event loop,
            # so that the calls in flight do not stall. The tallies are then read on the loop.
            await anyio.to_thread.run_sync(importlib.import_module, "prometheus_client.exposition")
        body, content_type = metrics.exposition(request.headers.get("accept", ""))
        return Response(body, media_type=content_type)

    return scrape
