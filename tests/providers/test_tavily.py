"""The Tavily driver against the shapes Tavily's API reference documents.

Fixture shapes: https://docs.tavily.com/api-reference/endpoint/search (`POST
https://api.tavily.com/search`, `Authorization: Bearer <key>`, JSON body `{query, max_results
(at most 20), search_depth (basic: 1 credit), time_range (day/week/month/year), topic}`; the
answer `{query, answer, images, results: [{title, url, content, score, raw_content, favicon}],
response_time, request_id}`); https://docs.tavily.com/documentation/rate-limits (429 with
`retry-after` in seconds); https://help.tavily.com/articles/8645538886-understanding-http-errors
(401 "Unauthorized: missing or invalid API key", 432 plan limit, 433 pay-as-you-go limit);
`published_date` on news results: tavily-ai/skills tavily-best-practices references/search.md.
"""

from __future__ import annotations

import json

import httpx2
import pytest

from frugal_proxy.config import Config
from frugal_proxy.providers import tavily
from tests.providers.api_fakes import SECRET, enabled_names, search

pytestmark = pytest.mark.anyio

BUILTIN = tavily.BUILTINS[0]
RESULTS = {
    "query": "mcp proxy",
    "answer": None,
    "images": [],
    "results": [
        {
            "title": "Model Context Protocol",
            "url": "https://modelcontextprotocol.io/",
            "content": "An open protocol that\nconnects AI applications [...] to tools.",
            "score": 0.81025416,
            "raw_content": None,
            "favicon": "https://modelcontextprotocol.io/favicon.ico",
        },
        {
            "title": "MCP proxies compared",
            "url": "https://news.example/mcp-proxies",
            "content": "Three proxies",
            "score": 0.5,
            "raw_content": None,
            "published_date": "Tue, 25 Nov 2025 09:00:00 GMT",
        },
    ],
    "response_time": "1.67",
    "request_id": "123e4567-e89b-12d3-a456-426614174111",
}


async def test_hits_are_normalized_and_the_key_goes_as_a_bearer_token() -> None:
    outcome, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), max_results=3)
    assert outcome.kind == "ok"
    first, second = outcome.data
    assert (first.title, first.url, first.source, first.published) == (
        "Model Context Protocol",
        "https://modelcontextprotocol.io/",
        "tavily",
        None,
    )
    assert first.snippet == "An open protocol that connects AI applications [...] to tools."
    assert second.published == "Tue, 25 Nov 2025 09:00:00 GMT"
    request = recorder.requests[0]
    assert request.method == "POST" and str(request.url) == "https://api.tavily.com/search"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"query": "mcp proxy", "max_results": 3, "search_depth": "basic"}


@pytest.mark.parametrize("freshness", ["day", "week", "month", "year"])
async def test_freshness_is_time_range_and_max_results_at_most_20(freshness: str) -> None:
    _, recorder = await search(
        BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), freshness=freshness, max_results=50
    )
    body = json.loads(recorder.requests[0].content)
    assert (body["time_range"], body["max_results"], body["search_depth"]) == (freshness, 20, "basic")


async def test_no_results_is_an_empty_answer() -> None:
    answer = {"query": "mcp proxy", "results": [], "response_time": 0.4}
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(200, json=answer))
    assert (outcome.kind, outcome.message) == ("empty", "tavily found nothing")


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (432, "tavily is over its plan's usage limit (432): upgrade the Tavily plan, or wait for next month's credits"),
        (433, "tavily is over its pay-as-you-go limit (433): raise the limit on the Tavily dashboard"),
    ],
)
async def test_its_own_limit_statuses_are_permanent_and_say_what_to_do(status: int, says: str) -> None:
    detail = {"detail": {"error": "This request exceeds your plan's set usage limit."}}
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(status, json=detail))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("permanent", says, None)


async def test_a_429_waits_its_retry_after() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(429, headers={"retry-after": "12"}))
    assert (outcome.kind, outcome.retry_after) == ("rate_limited", 12.0)
    assert outcome.message == "tavily is rate-limiting (429); it asks to wait 12 s"


def test_it_is_on_only_with_its_key_and_lists_its_price_and_monthly_credits() -> None:
    assert "tavily" not in enabled_names(Config(), {})
    assert "tavily" in enabled_names(Config(), {"TAVILY_API_KEY": SECRET})
    assert (BUILTIN.price_micros, BUILTIN.free_quota_monthly, BUILTIN.premium) == (8_000, 1_000, True)
