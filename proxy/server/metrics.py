"""Prometheus metrics for the HTTP endpoint's `GET /metrics`.

    Metrics         the tallies of one served endpoint and a `CollectorRegistry` of its own
                    (never prometheus_client's global one); `record_call`, `record_shaped` and
                    `count_request` are the hot-path entries
    HttpMetrics     ASGI middleware outside everything else: every HTTP request by method, route
                    path and status, the guard's refusals (401, 403, 429) included
    scrape_handler  the starlette handler for `GET /metrics` (Prometheus text format, or
                    OpenMetrics when the scraper asks for it)

The families:

    frugal_calls_total{tool,provider,outcome}        counter: tools/calls the pipeline finished
    frugal_call_duration_seconds{tool}              histogram: admission to sealed answer
    frugal_governor_shaped_total{tool}              counter: results the size governor cut
    frugal_governor_removed_bytes_total{tool}       counter: bytes those cuts took out
    frugal_upstream_up{upstream}                    gauge: 1 up, 0 down, read at scrape time
    frugal_upstream_starts_total{upstream}          counter: starts, restarts included
    frugal_http_requests_total{method,path,status}  counter

The hot path adds to plain dicts keyed by label values (no lock, no metric objects): it and the
scrape both run on the event loop's one thread, and the collector turns the tallies into metric
families only when scraped. prometheus_client itself (a few hundred milliseconds of imports) is
loaded by the first scrape, not at start-up.

Every label value is bounded and carries nothing a client sent beyond a tool name: `method` is
one of `METHODS` or `other`, `path` one of the app's route paths or `other`, `tool` the called
name when it looks like a tool name and fewer than `MAX_TOOL_LABELS` names have been seen, else
`(other)`. Arguments, results, tokens, session ids and client addresses never reach a label.
"""

from __future__ import annotations

import bisect
import importlib
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from frugal_proxy.server.connections import RESPONDED_KEY
from frugal_proxy.upstream.base import UpstreamBase

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

METRICS_PATH = "/metrics"
METHODS = frozenset({"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"})
OTHER = "other"
OTHER_TOOL = "(other)"  # parentheses: no valid tool name has them, so it cannot shadow one
MAX_TOOL_LABELS = 500
# The MCP tool-name format (letters, digits, `_ - .`, and SEP-986's `/`; at most 128 characters,
# the spec's longer bound): anything else is not a name an operator wants to see as a label.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_./-]{1,128}")
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


class Metrics:
    """What one served endpoint counts, and the registry `/metrics` exposes it from."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str, str], int] = {}
        self.durations: dict[str, Durations] = {}
        self.shaped: dict[str, int] = {}
        self.removed_bytes: dict[str, int] = {}
        self.requests: dict[tuple[str, str, int], int] = {}
        self.connections: list[UpstreamBase] = []
        self._tools: dict[str, str] = {}
        self._registry: CollectorRegistry | None = None

    def watch(self, connections: Sequence[UpstreamBase]) -> None:
        """Report these upstream connections' state at every scrape."""
        self.connections = list(connections)

    # -- the hot path ------------------------------------------------------------------------------

    def tool_label(self, name: str) -> str:
        """The label for a called tool name (bounded, see the module docstring)."""
        label = self._tools.get(name)
        if label is None:
            if len(self._tools) >= MAX_TOOL_LABELS or not _TOOL_NAME.fullmatch(name):
                return OTHER_TOOL
            label = self._tools[name] = name
        return label

    def record_call(self, tool: str, provider: str, outcome: str, seconds: float) -> None:
        """One finished tools/call (the tool by its exposed name)."""
        label = self.tool_label(tool)
        key = (label, provider, outcome)
        self.calls[key] = self.calls.get(key, 0) + 1
        durations = self.durations.get(label)
        if durations is None:
            durations = self.durations[label] = Durations()
        durations.observe(seconds)

    def record_shaped(self, tool: str, removed_bytes: int) -> None:
        """One result the governor cut, and by how many bytes."""
        label = self.tool_label(tool)
        self.shaped[label] = self.shaped.get(label, 0) + 1
        self.removed_bytes[label] = self.removed_bytes.get(label, 0) + max(0, removed_bytes)

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
        return self._families()

    def collect(self) -> Iterator[Metric]:
        """The families with every tally as it is now."""
        return self._families(filled=True)

    def _families(self, *, filled: bool = False) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        calls = CounterMetricFamily(
            "frugal_calls",
            "tools/call requests finished by the pipeline, by exposed tool, provider and outcome.",
            labels=["tool", "provider", "outcome"],
        )
        durations = HistogramMetricFamily(
            "frugal_call_duration_seconds",
            "Time from a tools/call's admission to its sealed answer, governor included.",
            labels=["tool"],
        )
        shaped = CounterMetricFamily(
            "frugal_governor_shaped", "tools/call results the size governor cut to fit their budget.", labels=["tool"]
        )
        removed = CounterMetricFamily(
            "frugal_governor_removed_bytes",
            "Bytes the size governor took out of results (spilled, recoverable with frugal__fetch_slice).",
            labels=["tool"],
        )
        up = GaugeMetricFamily(
            "frugal_upstream_up",
            "1 while the upstream connection is up and negotiated, 0 while it is down or not started.",
            labels=["upstream"],
        )
        starts = CounterMetricFamily(
            "frugal_upstream_starts",
            "Times the upstream connection was started: 1 plus its restarts (reconnects for a URL).",
            labels=["upstream"],
        )
        requests = CounterMetricFamily(
            "frugal_http_requests",
            "HTTP requests answered, by method, route path and status.",
            labels=["method", "path", "status"],
        )
        if filled:
            for (tool, provider, outcome), count in self.calls.items():
                calls.add_metric([tool, provider, outcome], count)
            for tool, histogram in self.durations.items():
                durations.add_metric([tool], histogram.cumulative(), histogram.total)
            for tool, count in self.shaped.items():
                shaped.add_metric([tool], count)
                removed.add_metric([tool], self.removed_bytes[tool])
            for connection in self.connections:
                up.add_metric([connection.name], 1.0 if connection.running else 0.0)
                starts.add_metric([connection.name], connection.generation)
            for (method, path, status), count in self.requests.items():
                requests.add_metric([method, path, str(status)], count)
        yield from (calls, durations, shaped, removed, up, starts, requests)


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
