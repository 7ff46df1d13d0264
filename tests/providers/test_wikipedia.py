"""The Wikipedia driver against the shapes the Wikimedia REST API documents.

Fixture shapes: https://www.mediawiki.org/wiki/API:REST_API/Reference#Search_pages
(`GET /w/rest.php/v1/search/page?q=&limit=` → `{"pages": [{id, key, title, excerpt,
matched_title, description, thumbnail}]}`, excerpt HTML with `<span class="searchmatch">`), and
the access policy's 429 with Retry-After (mediawiki.org/wiki/Wikimedia_APIs/Access_policy).
"""

from __future__ import annotations

import httpx2
import pytest

from frugal_proxy.providers import wikipedia
from frugal_proxy.providers.http_client import USER_AGENT, unreachable_advice
from tests.providers.api_fakes import Recorder, exchange, setup_for

pytestmark = pytest.mark.anyio

PAGES = {
    "pages": [
        {
            "id": 31717,
            "key": "Model_Context_Protocol",
            "title": "Model Context Protocol",
            "excerpt": 'The <span class="searchmatch">Model</span> Context &amp; Protocol',
            "matched_title": None,
            "description": "open protocol",
            "thumbnail": None,
        },
        {"id": 2, "key": "Proxy_server", "title": "Proxy server", "excerpt": "a <b>proxy</b>", "description": None},
    ]
}


async def search(recorder: Recorder, **arguments: object) -> object:
    provider = wikipedia.Wikipedia(setup_for(wikipedia.BUILTINS[0], recorder))
    return await provider.call(exchange("search", {"query": "mcp proxy", **arguments}))


async def test_hits_are_normalized_with_page_urls_and_plain_snippets() -> None:
    recorder = Recorder(lambda request: httpx2.Response(200, json=PAGES))
    outcome = await search(recorder, max_results=2)
    assert outcome.kind == "ok"  # type: ignore[attr-defined]
    first, second = outcome.data  # type: ignore[attr-defined]
    assert first.url == "https://en.wikipedia.org/wiki/Model_Context_Protocol"
    assert first.snippet == "The Model Context & Protocol" and first.source == "wikipedia"
    assert second.snippet == "a proxy"
    request = recorder.requests[0]
    assert request.url.path == "/w/rest.php/v1/search/page"
    assert request.url.params["q"] == "mcp proxy" and request.url.params["limit"] == "2"
    assert request.headers["user-agent"] == USER_AGENT


async def test_no_pages_is_an_empty_answer() -> None:
    outcome = await search(Recorder(lambda request: httpx2.Response(200, json={"pages": []})))
    assert outcome.kind == "empty"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("response", "kind", "retry_after", "words"),
    [
        (httpx2.Response(429, headers={"Retry-After": "7"}), "rate_limited", 7.0, "rate-limiting (429)"),
        (httpx2.Response(503), "transient", None, "failed (503)"),
        (httpx2.Response(403), "permanent", None, "refused the request (403)"),
        (httpx2.Response(200, text="<html>maintenance</html>"), "transient", None, "documented JSON"),
    ],
)
async def test_failures_are_classified(
    response: httpx2.Response, kind: str, retry_after: float | None, words: str
) -> None:
    outcome = await search(Recorder(lambda request: response))
    assert outcome.kind == kind and outcome.retry_after == retry_after  # type: ignore[attr-defined]
    assert words in outcome.message and "mcp proxy" not in outcome.message  # type: ignore[attr-defined]


async def test_a_connection_failure_is_transient() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    outcome = await search(Recorder(refuse))
    assert outcome.kind == "transient"  # type: ignore[attr-defined]
    assert outcome.message == (  # type: ignore[attr-defined]
        "wikipedia could not reach en.wikipedia.org: the connection was refused; " + unreachable_advice("wikipedia")
    )


async def test_base_url_replaces_the_documented_host() -> None:
    recorder = Recorder(lambda request: httpx2.Response(200, json=PAGES))
    provider = wikipedia.Wikipedia(setup_for(wikipedia.BUILTINS[0], recorder, base_url="http://127.0.0.1:9/de/"))
    outcome = await provider.call(exchange("search", {"query": "x"}))
    assert str(recorder.requests[0].url).startswith("http://127.0.0.1:9/de/w/rest.php/v1/search/page?")
    assert outcome.data[0].url == "http://127.0.0.1:9/de/wiki/Model_Context_Protocol"
