"""The result cache: a repeat answered from memory with its original provider at $0, keys over
what changes the answer (execute sharing the direct tools' entries), TTLs on a fake clock, and
what is never kept: browse, empty answers, near-empty pages, calls with a priority."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from frugal_proxy.capabilities import BrowseRequest, ExtractRequest, Page, SearchHit, SearchRequest
from frugal_proxy.config import CacheSettings
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies.result_cache import ResultCachePolicy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Call, Exchange, Outcome, Route
from frugal_proxy.state.result_cache import MemoryResultCache
from tests.fake_clock import Clock
from tests.pace import deadline

pytestmark = pytest.mark.anyio


def cache(clock: Clock) -> ResultCachePolicy:
    return ResultCachePolicy(CacheSettings(enabled=True), MemoryResultCache(8, clock), clock)


def call(tool: str, capability: str, request: object, strategy: str | None = None) -> Exchange:
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw({})}
    ex = Exchange(Call(1, tool, params), Route(tool, ("p",), capability=capability, strategy=strategy))
    ex.request = request
    return ex


def serving(capability: str, data: Any, price: int = 0) -> FakeProvider:
    async def answer(ex: Exchange) -> Outcome:
        return Outcome("ok", data=data) if data else Outcome("empty")

    return FakeProvider("p", answer, price, capability=capability)


def structured(answer: dict[str, Any]) -> dict[str, Any]:
    return jsonrpc.decode_any(answer["result"])["structuredContent"]  # type: ignore[no-any-return]


HITS = [SearchHit("MCP", "https://modelcontextprotocol.io/", "s", "p")]


async def test_a_repeat_is_answered_from_memory_at_no_cost() -> None:
    clock = Clock()
    provider = serving("search", HITS, price=5_000)
    pipeline = build_pipeline({"p": provider}, [cache(clock)])
    with deadline(5):
        first = structured(await pipeline.run(call("frugal__search", "search", SearchRequest("mcp"))))
        clock.now += 2.5
        again = structured(await pipeline.run(call("frugal__search", "search", SearchRequest("  mcp "))))
    assert len(provider.calls) == 1 and first["cost_usd"] == 0.005 and "cached" not in first
    assert again["results"] == first["results"]
    assert (again["provider_used"], again["cost_usd"], again["total_cost_usd"], again["attempts"]) == ("p", 0, 0, [])
    assert again["cached"] is True and again["cache_age_ms"] == 2500.0
    assert again["reason"] == "answered from the cache (first served by p)"


async def test_execute_shares_entries_and_a_priority_bypasses_them() -> None:
    clock = Clock()
    provider = serving("search", HITS)
    pipeline = build_pipeline({"p": provider}, [cache(clock)])
    with deadline(5):
        await pipeline.run(call("frugal__search", "search", SearchRequest("mcp")))
        shared = structured(
            await pipeline.run(call("frugal__execute", "search", SearchRequest("mcp", max_cost_usd=Decimal(0))))
        )
        await pipeline.run(call("frugal__execute", "search", SearchRequest("mcp"), strategy="premium"))
        await pipeline.run(call("frugal__search", "search", SearchRequest("mcp", max_results=6)))
    assert shared["cached"] is True
    assert len(provider.calls) == 3  # the first, the one with a priority, the one with other arguments


async def test_entries_expire_after_their_ttl() -> None:
    clock = Clock()
    page = Page("https://a.example/", markdown="An article. " * 40)
    provider = serving("extract", page)
    pipeline = build_pipeline({"p": provider}, [cache(clock)])
    with deadline(5):
        await pipeline.run(call("frugal__extract", "extract", ExtractRequest("https://a.example/")))
        clock.now += 15 * 60 - 1
        await pipeline.run(call("frugal__extract", "extract", ExtractRequest("https://a.example/")))
        clock.now += 1
        await pipeline.run(call("frugal__extract", "extract", ExtractRequest("https://a.example/")))
    assert len(provider.calls) == 2


@pytest.mark.parametrize(
    ("capability", "request_", "data"),
    [
        ("browse", BrowseRequest("https://a.example/"), Page("https://a.example/", markdown="Rendered. " * 40)),
        ("search", SearchRequest("nothing"), []),
        ("extract", ExtractRequest("https://spa.example/"), Page("https://spa.example/", markdown="Loading…")),
    ],
    ids=["browse", "empty", "near-empty page"],
)
async def test_what_is_never_kept(capability: str, request_: object, data: Any) -> None:
    clock = Clock()
    provider = serving(capability, data)
    pipeline = build_pipeline({"p": provider}, [cache(clock)])
    with deadline(5):
        for _ in range(2):
            await pipeline.run(call(f"frugal__{capability}", capability, request_))
    assert len(provider.calls) == 2
