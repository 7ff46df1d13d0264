"""The Marginalia driver against the shapes its API documents.

Fixture shapes: https://about.marginalia-search.com/article/api (updated 2025-12-08: `GET
https://api2.marginalia-search.com/search?query=&count=` with `API-Key: <key>`, the testing key
`public` that "often hits a rate limit" → `{query, license, results: [{url, title,
description, …}]}`); the 2023 version of that page for the 503 of the shared key.
"""

from __future__ import annotations

import httpx2
import pytest

from frugal_proxy.config import Config
from frugal_proxy.providers import marginalia
from tests.providers.api_fakes import SECRET, enabled_names, search

pytestmark = pytest.mark.anyio

BUILTIN = marginalia.BUILTINS[0]
RESULTS = {
    "query": "mcp proxy",
    "license": "CC-BY-NC-SA 4.0",
    "results": [
        {
            "url": "https://www.example.net/mcp.html",
            "title": "Notes on  MCP",
            "description": "A small page\nabout the protocol.",
            "quality": -1.5,
            "format": "HTML5",
            "details": "",
        },
        {"url": "https://www.example.net/proxy.html", "title": "Proxies"},
    ],
}


async def test_hits_are_normalized_with_the_public_key_by_default() -> None:
    outcome, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), key=None)
    assert outcome.kind == "ok"
    first, second = outcome.data
    assert (first.title, first.url) == ("Notes on MCP", "https://www.example.net/mcp.html")
    assert (first.snippet, first.source, first.published) == ("A small page about the protocol.", "marginalia", None)
    assert second.snippet == ""
    request = recorder.requests[0]
    assert str(request.url).startswith("https://api2.marginalia-search.com/search?")
    assert dict(request.url.params) == {"query": "mcp proxy", "count": "5"}
    assert request.headers["api-key"] == "public"


async def test_an_own_key_goes_in_the_header_and_freshness_is_ignored() -> None:
    _, recorder = await search(
        BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), max_results=50, freshness="day"
    )
    request = recorder.requests[0]
    assert request.headers["api-key"] == SECRET
    assert dict(request.url.params) == {"query": "mcp proxy", "count": "50"}


async def test_no_results_is_an_empty_answer() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(200, json={**RESULTS, "results": []}))
    assert outcome.kind == "empty"


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limited"), (503, "transient")])
async def test_the_busy_shared_key_suggests_an_own_one(status: int, kind: str) -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(status), key=None)
    assert outcome.kind == kind and "set MARGINALIA_API_KEY" in outcome.message
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(status))
    assert outcome.kind == kind and "MARGINALIA_API_KEY" not in outcome.message


def test_it_is_on_with_no_key() -> None:
    assert "marginalia" in enabled_names(Config(), {})
