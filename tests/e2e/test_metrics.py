"""`GET /metrics` on the HTTP endpoint: the SDK client makes calls, a plain HTTP client scrapes,
and prometheus_client's own parser reads the scrape.

Exact counts for what the tests control: the tools/calls, the HTTP requests of the raw client.
A distinctive secret-looking string rides in arguments, paths and headers and must never show
up in a scrape.
"""

from __future__ import annotations

import anyio
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import notes_command
from tests.e2e.test_client_roots import Tree, filesystem, read, rooted, tree
from tests.e2e.test_http_downstream import modern_body, modern_headers, sdk_client, start
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio
__all__ = ["tree"]  # the fixture, used by name

SECRET = "sk-live-7Q2w9Zr4xK-frugal-canary"
TOKEN = "metrics-bearer-5c1f0e9a"
UPSTREAM = "notes_server"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(http: httpx2.AsyncClient, base: str, headers: dict[str, str] | None = None) -> tuple[str, Samples]:
    reply = await http.get(f"{base}/metrics", headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return reply.text, samples


def family(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


def calls(tool: str, outcome: str) -> tuple[tuple[str, str], ...]:
    return (("outcome", outcome), ("provider", UPSTREAM), ("tool", tool))


async def test_calls_are_counted_by_tool_provider_and_outcome(mode: str) -> None:
    proxy = start(notes_command())
    try:
        with deadline(50):
            async with sdk_client(proxy.url, mode) as client:
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
                assert not (await client.call_tool("echo", {"text": SECRET})).is_error
                assert (await client.call_tool("read_note", {"name": SECRET})).is_error
                assert (await client.call_tool("no_such_tool", {"key": SECRET})).is_error
                assert not (await client.call_tool("blob", {"size": 100_000})).is_error
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                text, samples = await scrape(http, proxy.base)
    finally:
        proxy.stop()
    assert family(samples, "frugal_calls_total") == {
        calls("add", "ok"): 1.0,
        calls("echo", "ok"): 1.0,
        calls("read_note", "tool_error"): 1.0,
        # The SDK server answers an unknown tool with an isError result: a name no upstream listed
        # nor served is no label of its own.
        calls("(other)", "tool_error"): 1.0,
        calls("blob", "ok"): 1.0,
    }
    tools = ("add", "echo", "read_note", "(other)", "blob")
    assert family(samples, "frugal_call_duration_seconds_count") == {(("tool", tool),): 1.0 for tool in tools}
    assert all(
        samples[("frugal_call_duration_seconds_bucket", (("le", "+Inf"), ("tool", tool)))] == 1.0 for tool in tools
    )
    assert family(samples, "frugal_governor_shaped_total") == {(("tool", "blob"),): 1.0}
    assert samples[("frugal_governor_removed_bytes_total", (("tool", "blob"),))] > 100_000 - 32_768
    assert family(samples, "frugal_upstream_up") == {(("upstream", UPSTREAM),): 1.0}
    assert family(samples, "frugal_upstream_starts_total") == {(("upstream", UPSTREAM),): 1.0}
    assert samples[("frugal_http_requests_total", (("method", "POST"), ("path", "/mcp"), ("status", "200")))] >= 5
    assert SECRET not in text


async def test_the_upstream_gauge_follows_a_crash_and_the_restart() -> None:
    proxy = start(notes_command())
    up = ("frugal_upstream_up", (("upstream", UPSTREAM),))
    starts = ("frugal_upstream_starts_total", (("upstream", UPSTREAM),))
    restarts = ("frugal_upstream_restarts_total", (("upstream", UPSTREAM),))
    try:
        with deadline(50):
            async with sdk_client(proxy.url, "auto") as client, httpx2.AsyncClient(timeout=paced(20)) as http:
                _, before = await scrape(http, proxy.base)
                assert (before[up], before[starts], before[restarts]) == (1.0, 1.0, 0.0)
                # Listed first, as clients do: a tool that fails is a label of its own only
                # once the proxy knows it as a tool (a listing, or an answer without an error).
                await client.list_tools()
                assert (await client.call_tool("crash", {})).is_error
                # The call fails as the process exits; the gauge is read from the connection at
                # every scrape, so it reads 0 from then on until something restarts it.
                _, after = await scrape(http, proxy.base)
                while after[up] != 0.0:
                    await anyio.sleep(0.05)
                    _, after = await scrape(http, proxy.base)
                assert family(after, "frugal_calls_total") == {calls("crash", "transient"): 1.0}
                assert not (await client.call_tool("add", {"a": 1, "b": 1})).is_error  # restarts it
                _, restarted = await scrape(http, proxy.base)
                assert (restarted[up], restarted[starts], restarted[restarts]) == (1.0, 2.0, 1.0)
    finally:
        proxy.stop()


async def test_metrics_needs_the_token_and_counts_every_http_answer() -> None:
    proxy = start(notes_command(), env={"FRUGAL_AUTH_TOKEN": TOKEN})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    base = proxy.base
    try:
        with deadline(50):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                missing = await http.get(f"{base}/metrics")
                assert missing.status_code == 401
                assert missing.headers["www-authenticate"].startswith("Bearer")
                assert (
                    await http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {SECRET}"})
                ).status_code == 401
                assert (await http.get(f"{base}/healthz")).status_code == 200
                call = modern_body("tools/call", {"name": "echo", "arguments": {"text": SECRET}})
                answered = await http.post(
                    proxy.url, json=call, headers={**modern_headers("tools/call", "echo"), **auth}
                )
                assert answered.status_code == 200
                assert answered.json()["result"]["structuredContent"] == {"result": SECRET}
                assert (await http.get(proxy.url, headers={**modern_headers("tools/list"), **auth})).status_code == 405
                assert (await http.get(f"{base}/{SECRET}", headers=auth)).status_code == 404
                assert (await http.request("BREW", f"{base}/metrics", headers=auth)).status_code == 405
                text, samples = await scrape(http, base, auth)
    finally:
        proxy.stop()

    def request(method: str, path: str, status: int) -> tuple[tuple[str, str], ...]:
        return (("method", method), ("path", path), ("status", str(status)))

    assert family(samples, "frugal_http_requests_total") == {
        request("GET", "/metrics", 401): 2.0,
        request("GET", "/healthz", 200): 1.0,
        request("POST", "/mcp", 200): 1.0,
        request("GET", "/mcp", 405): 1.0,
        request("GET", "other", 404): 1.0,
        request("other", "/metrics", 405): 1.0,
    }
    assert family(samples, "frugal_calls_total") == {calls("echo", "ok"): 1.0}
    assert SECRET not in text
    assert TOKEN not in text


async def test_connections_per_root_set_are_a_gauge(tree: Tree) -> None:
    """Two 2026-07-28 clients granting two root sets on a session-era upstream (server-filesystem):
    one connection each beside the upstream's own, so the gauge reads 0, then 1, then 2; the
    same roots again open none."""
    served = filesystem(tree)
    gauge = "frugal_upstream_root_set_connections"
    try:
        with deadline(90):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                _, before = await scrape(http, served.base)
                ((upstream_labels, _),) = family(before, "frugal_upstream_up").items()
                assert family(before, gauge) == {upstream_labels: 0.0}
                async with rooted(served.url, tree.top) as wide:
                    assert not (await read(wide, tree.hello))[0]
                    _, one = await scrape(http, served.base)
                    async with rooted(served.url, tree.sub) as narrow, rooted(served.url, tree.top) as same:
                        assert (await read(narrow, tree.hello))[0]  # outside its roots
                        assert not (await read(same, tree.hello))[0]
                        _, two = await scrape(http, served.base)
    finally:
        served.stop()
    assert (family(one, gauge), family(two, gauge)) == ({upstream_labels: 1.0}, {upstream_labels: 2.0})
