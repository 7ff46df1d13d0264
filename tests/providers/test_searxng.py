"""The SearXNG driver against the shapes its JSON API documents.

Fixture shapes: https://docs.searxng.org/dev/search_api.html (searxng/searxng
docs/dev/search_api.rst: `GET /search?q=&format=json&pageno=&time_range=` → `{query,
number_of_results, results: [{url, title, content, engine, engines, score, category,
publishedDate?}], answers, corrections, infoboxes, suggestions, unresponsive_engines}`; 403 when
`json` is not in `search.formats`); searx/webadapter.py `parse_time_range` (day, week, month,
year); the limiter's 429 (searxng-docker settings.yml).
"""

from __future__ import annotations

import httpx2
import pytest

from frugal_proxy.config import Config
from frugal_proxy.providers import searxng
from tests.providers.api_fakes import enabled_names, search

pytestmark = pytest.mark.anyio

BUILTIN = searxng.BUILTINS[0]
INSTANCE = {"SEARXNG_URL": "http://127.0.0.1:8888/searx/"}
RESULTS = {
    "query": "mcp proxy",
    "number_of_results": 0,
    "results": [
        {
            "url": "https://modelcontextprotocol.io/",
            "title": "Model Context Protocol",
            "content": "An open protocol\n that connects AI applications to tools.",
            "engine": "duckduckgo",
            "engines": ["duckduckgo", "brave"],
            "score": 4.0,
            "category": "general",
            "publishedDate": "2025-11-25T00:00:00",
        },
        {"url": "https://example.org/a", "title": "", "content": None, "engine": "bing", "publishedDate": None},
        {"url": "https://example.org/b", "title": "B", "content": "third", "engine": "bing"},
    ],
    "answers": [],
    "corrections": [],
    "infoboxes": [],
    "suggestions": [],
    "unresponsive_engines": [],
}


async def test_hits_are_normalized_and_cut_to_max_results() -> None:
    outcome, recorder = await search(
        BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), key=None, environ=INSTANCE, max_results=2
    )
    assert outcome.kind == "ok"
    first, second = outcome.data
    assert (first.title, first.url) == ("Model Context Protocol", "https://modelcontextprotocol.io/")
    assert first.source == "searxng"
    assert first.snippet == "An open protocol that connects AI applications to tools."
    assert first.published == "2025-11-25T00:00:00"
    assert (second.title, second.snippet, second.published) == ("https://example.org/a", "", None)
    request = recorder.requests[0]
    assert str(request.url).startswith("http://127.0.0.1:8888/searx/search?")
    assert dict(request.url.params) == {"q": "mcp proxy", "format": "json", "pageno": "1"}


@pytest.mark.parametrize("freshness", ["day", "week", "month", "year"])
async def test_freshness_is_the_time_range(freshness: str) -> None:
    _, recorder = await search(
        BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), key=None, environ=INSTANCE, freshness=freshness
    )
    assert recorder.requests[0].url.params["time_range"] == freshness


async def test_no_results_is_an_empty_answer() -> None:
    answer = {**RESULTS, "results": [], "unresponsive_engines": [["google", "timeout"]]}
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(200, json=answer), environ=INSTANCE)
    assert outcome.kind == "empty" and "searxng found nothing" in outcome.message


async def test_a_403_says_json_is_off_in_settings() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(403, text="Forbidden"), environ=INSTANCE)
    assert outcome.kind == "permanent"
    assert "format=json" in outcome.message and "search.formats" in outcome.message
    assert "settings.yml" in outcome.message


async def test_base_url_replaces_the_instance_url() -> None:
    _, recorder = await search(
        BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), base_url="http://10.0.0.5:8080/", environ=INSTANCE
    )
    assert str(recorder.requests[0].url).startswith("http://10.0.0.5:8080/search?")


def test_it_is_on_only_with_an_instance_url() -> None:
    assert "searxng" not in enabled_names(Config(), {})
    assert "searxng" not in enabled_names(Config(), {"SEARXNG_URL": "searx.local"})
    assert "searxng" in enabled_names(Config(), INSTANCE)
