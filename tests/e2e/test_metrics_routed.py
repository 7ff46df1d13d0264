"""`/metrics` after routed calls through a real `serve --config --http`: SDK clients in both eras
make the calls, a plain HTTP client scrapes, prometheus_client's parser reads the scrape, and
every counter is checked to have moved by exactly what the calls did.

The providers are loopback fakes answering their APIs' documented shapes: Wikipedia's REST
search (tests/servers/fake_apis.py, its `/busy` prefix answering 429 with Retry-After: 7) is
the cheap first candidate and is rate-limited, so each search fails over to Tavily
(tests/servers/search_apis.py; docs.tavily.com/api-reference/endpoint/search), configured at
$0.008 a call, no free quota, a $0.03 daily budget. Money is checked in micro-dollars, exactly.

The same scrape backs the examples' monitoring files: every PromQL expression of the Grafana
dashboard and of the Prometheus alert rules is parsed (promql-parser) and every metric it names
must be a family this scrape carries.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import promql_parser
import pytest
import yaml
from mcp_types import TextContent

from frugal_proxy.providers import registry
from frugal_proxy.server.metrics import exported_names
from tests.conftest import ROOT, notes_command
from tests.e2e.test_http_downstream import Proxy, sdk_client
from tests.e2e.test_metrics import Samples, family
from tests.pace import deadline, paced
from tests.servers.fake_apis import FakeApis, fake_apis
from tests.servers.search_apis import SearchApis, search_apis

pytestmark = pytest.mark.anyio

KEY = "tvly-metrics-0123456789abcdef"  # the fake Tavily's key: never in a scrape
SECRET_TOOL = "sk_live_7Q2w9Zr4xK_canary"  # a made-up tool name: never a label
MONITORING = ROOT / "examples" / "monitoring"
PRICE = 8_000  # micro-dollars: cost_per_call = 0.008
CAP = 30_000  # daily_budget_usd = 0.03

OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name not in ("wikipedia", "tavily")
)


def config(wikipedia: str, tavily: str) -> str:
    return (
        f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n"
        f'[search_providers.wikipedia]\nbase_url = "{wikipedia}"\n'
        f'[search_providers.tavily]\nbase_url = "{tavily}"\n'
        'cost_per_call = 0.008\nfree_quota_monthly = 0\ndaily_budget_usd = "0.03"\n'
        "[cache]\nenabled = true\n"
        "[routing]\nloop_limit = 2\ncooldown = '10m'\n" + OFF
    )


@dataclass
class Routed:
    proxy: Proxy
    wiki: FakeApis
    paid: SearchApis


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[Routed]:
    """`serve --http` over the notes server and the two fake search APIs."""
    with fake_apis() as wiki, search_apis(KEY) as paid:
        path = tmp_path / "frugal.toml"
        path.write_text(config(f"{wiki.base}/busy", f"{paid.base}/tavily"))
        env = {"FRUGAL_HOME": str(tmp_path / "home"), "TAVILY_API_KEY": KEY}
        os.environ.pop("FRUGAL_CONFIG", None)
        proxy = Proxy(
            [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path), "--http", "127.0.0.1:0"], env
        )
        try:
            proxy.wait_listening()
            yield Routed(proxy, wiki, paid)
        finally:
            proxy.stop()


async def scrape(base: str) -> tuple[str, Samples, set[str]]:
    """The scrape's text, its samples, and the names of the families it carries (a counter's
    with `_total`, a histogram's with its three series)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx2.AsyncClient(timeout=paced(20)) as http:
        reply = await http.get(f"{base}/metrics")
    assert reply.status_code == 200, reply.text
    samples: Samples = {}
    names: set[str] = set()
    for parsed in text_string_to_metric_families(reply.text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(parsed.type, ("",))
        names.update(parsed.name + suffix for suffix in suffixes)
        for sample in parsed.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return reply.text, samples, names


def text_of(result: object) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))  # type: ignore[attr-defined]


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


async def test_routed_calls_move_each_counter_by_exactly_what_they_did(routed: Routed, mode: str) -> None:
    proxy = routed.proxy
    with deadline(90):
        async with sdk_client(proxy.url, mode) as client:
            await client.list_tools()
            # wikipedia 429 (Retry-After 7 s: over 5 s, so no retry) -> failover -> tavily answers.
            first = await client.call_tool("frugal__search", {"query": "protocol"})
            assert not first.is_error, text_of(first)
            again = await client.call_tool("frugal__search", {"query": "protocol"})  # the cache answers
            assert not again.is_error, text_of(again)
            looped = await client.call_tool("frugal__search", {"query": "protocol"})  # 3 > loop_limit 2
            assert looped.is_error and "loop guard" in text_of(looped)
            # wikipedia cools down for 10 minutes: skipped; tavily answers (and has spent 2 x $0.008).
            other = await client.call_tool("frugal__search", {"query": "proxy"})
            assert not other.is_error, text_of(other)
            busy = await client.call_tool("frugal__search", {"query": "busy"})  # tavily 429: no provider left
            assert busy.is_error
            assert not (await client.call_tool("add", {"a": 1, "b": 2})).is_error
            assert (await client.call_tool(SECRET_TOOL, {})).is_error
        text, samples, _ = await scrape(proxy.base)
    search, tavily, wikipedia = "frugal__search", "tavily", "wikipedia"
    assert family(samples, "frugal_calls_total") == {
        labels(tool=search, provider=tavily, outcome="ok"): 2,
        labels(tool=search, provider=tavily, outcome="cached"): 1,
        labels(tool=search, provider="none", outcome="denied"): 1,
        labels(tool=search, provider=tavily, outcome="rate_limited"): 1,
        labels(tool="add", provider="notes", outcome="ok"): 1,
        labels(tool="(other)", provider="notes", outcome="tool_error"): 1,
    }
    assert family(samples, "frugal_provider_attempts_total") == {
        labels(capability="search", provider=wikipedia, outcome="rate_limited"): 1,
        labels(capability="search", provider=tavily, outcome="ok"): 2,
        labels(capability="search", provider=tavily, outcome="rate_limited"): 1,
        labels(capability="tool", provider="notes", outcome="ok"): 2,
    }
    assert family(samples, "frugal_failovers_total") == {labels(tool=search, provider=wikipedia): 1}
    # Only answers bill: two of tavily's at its price, its 429 released; wikipedia is free.
    assert family(samples, "frugal_provider_spend_microdollars_total") == {
        labels(capability="search", provider=tavily): 2 * PRICE
    }
    assert family(samples, "frugal_budget_limit_microdollars") == {labels(capability="search", provider=tavily): CAP}
    assert family(samples, "frugal_budget_remaining_microdollars") == {
        labels(capability="search", provider=tavily): CAP - 2 * PRICE
    }
    cooling = family(samples, "frugal_provider_cooling_down")
    assert cooling == {labels(provider=wikipedia): 1, labels(provider=tavily): 1, labels(provider="notes"): 0}
    left = family(samples, "frugal_provider_cooldown_remaining_seconds")
    assert 0 < left[labels(provider=tavily)] <= 600 and 0 < left[labels(provider=wikipedia)] <= 600
    assert left[labels(provider="notes")] == 0
    assert family(samples, "frugal_cache_hits_total") == {labels(capability="search"): 1}
    assert family(samples, "frugal_cache_misses_total") == {labels(capability="search"): 3}
    assert family(samples, "frugal_loop_guard_refusals_total") == {labels(tool=search): 1}
    assert family(samples, "frugal_provider_attempt_duration_seconds_count") == {
        labels(capability="search", provider=wikipedia): 1,
        labels(capability="search", provider=tavily): 3,
        labels(capability="tool", provider="notes"): 2,
    }
    assert family(samples, "frugal_call_duration_seconds_count")[labels(tool=search)] == 5
    assert family(samples, "frugal_upstream_up") == {labels(upstream="notes"): 1}
    assert family(samples, "frugal_upstream_restarts_total") == {labels(upstream="notes"): 0}
    assert SECRET_TOOL not in text and KEY not in text
    # What the fakes were sent: one 429 of wikipedia's (then fenced), tavily's three calls.
    assert (routed.wiki.requests["busy"], sum(routed.paid.requests.values())) == (1, 3)


# Grafana's own range variables, as Grafana fills them in before the query goes to Prometheus.
GRAFANA_RANGES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "6h"}


def expressions() -> list[tuple[str, str]]:
    """Every PromQL expression of the examples' dashboard and alert rules, with where it is."""
    found: list[tuple[str, str]] = []
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((f"dashboard panel {panel['title']!r}", target["expr"]))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":  # label_values(SELECTOR, LABEL): the selector is PromQL
            selector = variable["query"]["query"].removeprefix("label_values(").rpartition(",")[0]
            found.append((f"dashboard variable {variable['name']!r}", selector))
    rules = yaml.safe_load((MONITORING / "alert-rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            found.append((f"alert {rule['alert']!r}", rule["expr"]))
    filled = []
    for where, expr in found:
        for variable, value in GRAFANA_RANGES.items():
            expr = expr.replace(variable, value)
        filled.append((where, expr))
    return filled


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (a parse error fails the test)."""
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name: {node}"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


async def test_every_query_of_the_dashboard_and_alerts_names_an_exported_metric(routed: Routed) -> None:
    proxy = routed.proxy
    with deadline(60):
        async with sdk_client(proxy.url, "auto") as client:
            assert not (await client.call_tool("frugal__search", {"query": "protocol"})).is_error
        _, samples, scraped = await scrape(proxy.base)
    assert scraped == exported_names()  # every family the code declares is in a real scrape
    found = expressions()
    assert len(found) >= 10
    named: set[str] = set()
    for where, expr in found:
        names = metric_names(expr)
        assert names, f"{where}: {expr!r} names no metric"
        assert names <= scraped, f"{where}: {sorted(names - scraped)} not exported by /metrics"
        named |= names
    # The dashboard and the rules between them read every family but the HTTP endpoint's own.
    assert {name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for name in named} >= {
        "frugal_calls_total",
        "frugal_provider_attempts_total",
        "frugal_failovers_total",
        "frugal_provider_spend_microdollars_total",
        "frugal_budget_remaining_microdollars",
        "frugal_provider_cooling_down",
        "frugal_cache_hits_total",
        "frugal_loop_guard_refusals_total",
        "frugal_governor_removed_bytes_total",
        "frugal_upstream_up",
        "frugal_upstream_restarts_total",
        "frugal_call_duration_seconds",
        "frugal_upstream_root_set_connections",
    }
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((MONITORING / "alert-rules.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    assert {"FrugalProviderCoolingDown", "FrugalBudgetNearlySpent", "FrugalUpstreamDown", "FrugalErrorRatio"} <= alerts
    assert samples  # the scrape had samples
