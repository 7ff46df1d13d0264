"""The Serper driver against the shapes public Serper clients document.

Fixture shapes: open-webui backend/open_webui/retrieval/web/serper.py and LangChain's
GoogleSerperAPIWrapper (`POST https://google.serper.dev/search`, `X-API-KEY`, JSON body `{q,
num, tbs}`), public SerperResponse types (`{organic: [{title, link, snippet, position, date?}],
answerBox, knowledgeGraph, peopleAlsoAsk, relatedSearches, searchParameters}`), and
api-evangelist/serper serper-rate-limits.yml (429, no Retry-After). `tbs=qdr:*` for freshness
is Google's convention (UNCONFIRMED on serper.dev).
"""

from __future__ import annotations

import json

import httpx2
import pytest

from frugal_proxy.config import Config
from frugal_proxy.providers import serper
from tests.providers.api_fakes import SECRET, enabled_names, search

pytestmark = pytest.mark.anyio

BUILTIN = serper.BUILTINS[0]
RESULTS = {
    "searchParameters": {"q": "mcp proxy", "type": "search", "engine": "google"},
    "knowledgeGraph": {"title": "Model Context Protocol"},
    "organic": [
        {
            "title": "Model Context Protocol",
            "link": "https://modelcontextprotocol.io/",
            "snippet": "An open protocol that\nconnects AI applications.",
            "position": 1,
            "date": "Nov 25, 2025",
        },
        {"title": "An MCP proxy", "link": "https://example.org/proxy", "snippet": "frugal", "position": 2},
    ],
    "peopleAlsoAsk": [],
    "relatedSearches": [{"query": "mcp server"}],
}


async def test_hits_are_normalized_and_the_key_goes_in_the_header() -> None:
    outcome, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), max_results=3)
    assert outcome.kind == "ok"
    first, second = outcome.data
    assert (first.title, first.url, first.source) == (
        "Model Context Protocol",
        "https://modelcontextprotocol.io/",
        "serper",
    )
    assert (first.snippet, first.published) == ("An open protocol that connects AI applications.", "Nov 25, 2025")
    assert second.published is None
    request = recorder.requests[0]
    assert request.method == "POST" and str(request.url) == "https://google.serper.dev/search"
    assert request.headers["x-api-key"] == SECRET and request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"q": "mcp proxy", "num": 3}


@pytest.mark.parametrize(
    ("freshness", "tbs"), [("day", "qdr:d"), ("week", "qdr:w"), ("month", "qdr:m"), ("year", "qdr:y")]
)
async def test_freshness_is_tbs(freshness: str, tbs: str) -> None:
    _, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), freshness=freshness)
    assert json.loads(recorder.requests[0].content)["tbs"] == tbs


async def test_no_organic_results_is_an_empty_answer() -> None:
    answer = {"searchParameters": RESULTS["searchParameters"]}
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(200, json=answer))
    assert outcome.kind == "empty"


async def test_out_of_credits_without_retry_after_is_rate_limited_with_no_wait() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(429, json={"message": "Not enough credits"}))
    assert (outcome.kind, outcome.retry_after) == ("rate_limited", None)


def test_it_is_on_only_with_its_key() -> None:
    assert "serper" not in enabled_names(Config(), {})
    assert "serper" in enabled_names(Config(), {"SERPER_API_KEY": SECRET})
