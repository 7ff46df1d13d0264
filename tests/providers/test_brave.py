"""The Brave driver against the shapes the Brave Search API documents.

Fixture shapes: https://api-dashboard.search.brave.com/api-reference/web/search/get and
https://api.search.brave.com/app/documentation/web-search/query (`GET /res/v1/web/search?q=&count=
&freshness=pd|pw|pm|py`, `X-Subscription-Token`, `Accept: application/json`; count at most 20);
the response `{query: {original, more_results_available}, web: {results: [{title, url,
description, extra_snippets?, page_age?, age?, profile}]}}` as third-party summaries give it;
https://api.search.brave.com/app/documentation/web-search/response-headers (`X-RateLimit-*` with
a per-second and a per-month window, `X-RateLimit-Reset: 1, 1419704`).
"""

from __future__ import annotations

import httpx2
import pytest

from frugal_proxy.config import Config
from frugal_proxy.providers import brave
from tests.providers.api_fakes import SECRET, enabled_names, search

pytestmark = pytest.mark.anyio

BUILTIN = brave.BUILTINS[0]
RESULTS = {
    "type": "search",
    "query": {"original": "mcp proxy", "more_results_available": True},
    "web": {
        "type": "search",
        "results": [
            {
                "title": "Model Context <strong>Protocol</strong>",
                "url": "https://modelcontextprotocol.io/",
                "description": "An open <strong>protocol</strong> that connects AI &amp; tools.",
                "page_age": "2025-11-25T00:00:00",
                "age": "November 25, 2025",
                "profile": {"name": "Model Context Protocol", "img": "https://imgs.search.brave.com/x"},
                "extra_snippets": ["more"],
            },
            {"title": "An MCP proxy", "url": "https://example.org/proxy", "description": "x", "age": "2 days ago"},
            {"title": "Third", "url": "https://example.org/third", "description": "y"},
        ],
    },
}
LIMITED = {"X-RateLimit-Limit": "1, 15000", "X-RateLimit-Remaining": "0, 14000", "X-RateLimit-Reset": "1, 1419704"}


async def test_hits_are_normalized_with_plain_snippets_and_their_age() -> None:
    outcome, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), max_results=3)
    assert outcome.kind == "ok"
    first, second, third = outcome.data
    assert (first.title, first.url, first.source) == (
        "Model Context Protocol",
        "https://modelcontextprotocol.io/",
        "brave",
    )
    assert (first.snippet, first.published) == ("An open protocol that connects AI & tools.", "2025-11-25T00:00:00")
    assert second.published == "2 days ago" and third.published is None
    request = recorder.requests[0]
    assert str(request.url).startswith("https://api.search.brave.com/res/v1/web/search?")
    assert dict(request.url.params) == {"q": "mcp proxy", "count": "3"}
    assert request.headers["x-subscription-token"] == SECRET and request.headers["accept"] == "application/json"


@pytest.mark.parametrize(("freshness", "code"), [("day", "pd"), ("week", "pw"), ("month", "pm"), ("year", "py")])
async def test_freshness_and_count_follow_the_api(freshness: str, code: str) -> None:
    _, recorder = await search(
        BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), freshness=freshness, max_results=50
    )
    params = recorder.requests[0].url.params
    assert (params["freshness"], params["count"]) == (code, "20")


async def test_no_web_section_is_an_empty_answer() -> None:
    answer = {"type": "search", "query": {"original": "mcp proxy", "more_results_available": False}}
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(200, json=answer))
    assert outcome.kind == "empty"


async def test_a_429_waits_for_the_per_second_window() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(429, headers=LIMITED))
    assert (outcome.kind, outcome.retry_after) == ("rate_limited", 1.0)
    assert "resets in 1 s" in outcome.message


async def test_retry_after_wins_over_the_reset_header() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(429, headers={**LIMITED, "Retry-After": "3"}))
    assert outcome.retry_after == 3.0


@pytest.mark.parametrize("reset", ["", "soon, 10", "-1, 5", "nan"])
async def test_an_unreadable_reset_header_gives_no_wait(reset: str) -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(429, headers={"X-RateLimit-Reset": reset}))
    assert (outcome.kind, outcome.retry_after) == ("rate_limited", None)


def test_it_is_on_only_with_its_key() -> None:
    assert "brave" not in enabled_names(Config(), {})
    assert "brave" in enabled_names(Config(), {"BRAVE_API_KEY": SECRET})
