"""The Firecrawl driver against the shapes Firecrawl documents.

Fixture shapes: docs.firecrawl.dev/features/scrape and /advanced-scraping-guide (`POST
/v2/scrape` with `{url, formats, onlyMainContent}` -> `{"success": true, "data": {"markdown",
"html", "metadata": {"title", "description", "language", "sourceURL", "url", "statusCode"}}}`),
docs.firecrawl.dev/billing (402 when out of credits) and /rate-limits (429, Retry-After when
present).
"""

from __future__ import annotations

import json

import httpx2
import pytest

from frugal_proxy.capabilities import Page
from frugal_proxy.config import Config
from frugal_proxy.providers import firecrawl
from frugal_proxy.records import Outcome
from tests.providers.api_fakes import Recorder, enabled_names, exchange, setup_for

pytestmark = pytest.mark.anyio
KEY = "fc-0123456789abcdef"
TARGET = "https://example.org/post"


def scraped(status: int = 200, **data: object) -> httpx2.Response:
    metadata = {"title": "A post", "language": "en", "sourceURL": TARGET, "url": TARGET, "statusCode": status}
    return httpx2.Response(200, json={"success": True, "data": {"metadata": metadata, **data}})


async def scrape(recorder: Recorder, *, base_url: str | None = None, **arguments: object) -> Outcome:
    provider = firecrawl.Firecrawl(setup_for(firecrawl.BUILTINS[0], recorder, key=KEY, base_url=base_url))
    return await provider.call(exchange("extract", {"url": TARGET, **arguments}))


async def test_the_main_content_is_scraped_as_markdown() -> None:
    recorder = Recorder(lambda request: scraped(markdown="# A post\n\nIts text."))
    outcome = await scrape(recorder)
    assert outcome.kind == "ok" and outcome.data == Page(url=TARGET, title="A post", markdown="# A post\n\nIts text.")
    request = recorder.requests[0]
    assert request.method == "POST" and str(request.url) == "https://api.firecrawl.dev/v2/scrape"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert json.loads(request.content) == {"url": TARGET, "formats": ["markdown"], "onlyMainContent": True}


async def test_html_is_asked_for_and_text_is_the_markdown() -> None:
    recorder = Recorder(lambda request: scraped(markdown="# md", html="<h1>md</h1>"))
    outcome = await scrape(recorder, formats=["text", "html"])
    assert outcome.data == Page(url=TARGET, title="A post", text="# md", html="<h1>md</h1>")
    assert json.loads(recorder.requests[0].content)["formats"] == ["markdown", "html"]


async def test_empty_markdown_is_an_empty_answer() -> None:
    outcome = await scrape(Recorder(lambda request: scraped(markdown="")))
    assert outcome.kind == "empty" and outcome.message == "firecrawl found no readable text on the page"


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [(404, "permanent", "example.org answered 404"), (503, "transient", "example.org answered 503")],
)
async def test_the_pages_own_failure_is_not_content(status: int, kind: str, words: str) -> None:
    outcome = await scrape(Recorder(lambda request: scraped(status, markdown="# Not Found")))
    assert outcome.kind == kind and words in outcome.message


@pytest.mark.parametrize(
    ("response", "kind", "retry_after", "words"),
    [
        (
            httpx2.Response(
                429, headers={"Retry-After": "20"}, json={"success": False, "error": "Rate limit exceeded"}
            ),
            "rate_limited",
            20.0,
            "rate-limiting (429); it asks to wait 20 s",
        ),
        (httpx2.Response(401, json={"success": False, "error": "Unauthorized"}), "permanent", None, "refused the key"),
        (httpx2.Response(402, json={"success": False, "error": "Payment required"}), "permanent", None, "credits"),
        (httpx2.Response(403), "permanent", None, "refused the request (403)"),
        (httpx2.Response(500, json={"success": False, "error": "boom"}), "transient", None, "failed (500)"),
        (httpx2.Response(200, text="<html>gateway</html>"), "transient", None, "documented JSON"),
        (httpx2.Response(200, json={"success": False, "error": "x"}), "transient", None, "without success"),
    ],
)
async def test_failures_are_classified(
    response: httpx2.Response, kind: str, retry_after: float | None, words: str
) -> None:
    outcome = await scrape(Recorder(lambda request: response))
    assert (outcome.kind, outcome.retry_after) == (kind, retry_after) and words in outcome.message
    assert KEY not in outcome.message


async def test_a_connection_failure_is_transient() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    outcome = await scrape(Recorder(refuse))
    assert outcome.kind == "transient" and outcome.message == "firecrawl did not answer in time (ReadTimeout)"


async def test_base_url_replaces_the_api_host() -> None:
    recorder = Recorder(lambda request: scraped(markdown="x"))
    await scrape(recorder, base_url="http://127.0.0.1:3002/")
    assert str(recorder.requests[0].url) == "http://127.0.0.1:3002/v2/scrape"


def test_it_needs_its_key_and_costs_a_tenth_of_a_cent() -> None:
    assert "firecrawl" not in enabled_names(Config(), {})
    assert "firecrawl" in enabled_names(Config(), {"FIRECRAWL_API_KEY": KEY})
    assert firecrawl.BUILTINS[0].price_micros == 1_000
