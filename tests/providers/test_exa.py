"""The Exa driver against the shapes Exa's API reference documents.

Fixture shapes: https://exa.ai/docs/reference/search (`POST https://api.exa.ai/search`,
`x-api-key`, JSON body `{query, type, numResults, contents: {highlights}, startPublishedDate}`;
the answer `{requestId, results: [{title, url, publishedDate, author, id, image, favicon, text,
highlights, highlightScores, summary}], searchType, costDollars}`, its own example's values);
https://exa.ai/docs/admin/pricing ($7 per 1,000 searches with up to 10 results, $10 of free
credits a month); https://exa.ai/docs/reference/error-codes (402 out of credits).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx2
import pytest

from frugal_proxy.config import Config
from frugal_proxy.providers import exa
from tests.providers.api_fakes import SECRET, enabled_names, search

pytestmark = pytest.mark.anyio

BUILTIN = exa.BUILTINS[0]
RESULTS = {
    "requestId": "b5947044c4b78efa9552a7c89b306d95",
    "searchType": "neural",
    "results": [
        {
            "title": "A Comprehensive Overview of Large Language Models",
            "url": "https://arxiv.org/pdf/2307.06435.pdf",
            "publishedDate": "2023-11-16T01:36:32.547Z",
            "author": "Humza  Naveed, University of Engineering and Technology (UET), Lahore, Pakistan",
            "id": "https://arxiv.org/abs/2307.06435",
            "image": "https://arxiv.org/pdf/2307.06435.pdf/page_1.png",
            "favicon": "https://arxiv.org/favicon.ico",
            "text": "Abstract Large Language Models (LLMs) have recently demonstrated remarkable capabilities...",
            "highlights": ["Such requirements have limited their adoption...", "LLMs are\nused widely."],
            "highlightScores": [0.4600165784358978, 0.31],
        },
        {"title": None, "url": "https://example.org/untitled", "summary": "A page with no title."},
        {"title": "Text only", "url": "https://example.org/text", "text": "x" * 900},
    ],
    "costDollars": {"total": 0.007},
}


async def test_hits_are_normalized_from_highlights_summary_or_text() -> None:
    outcome, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), max_results=3)
    assert outcome.kind == "ok"
    first, untitled, text_only = outcome.data
    assert (first.title, first.url, first.source, first.published) == (
        "A Comprehensive Overview of Large Language Models",
        "https://arxiv.org/pdf/2307.06435.pdf",
        "exa",
        "2023-11-16T01:36:32.547Z",
    )
    assert first.snippet == "Such requirements have limited their adoption... … LLMs are used widely."
    assert (untitled.title, untitled.snippet) == ("https://example.org/untitled", "A page with no title.")
    assert text_only.snippet == "x" * 500
    request = recorder.requests[0]
    assert request.method == "POST" and str(request.url) == "https://api.exa.ai/search"
    assert request.headers["x-api-key"] == SECRET and request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {
        "query": "mcp proxy",
        "type": "auto",
        "numResults": 3,
        "contents": {"highlights": True},
    }


async def test_num_results_stays_within_what_the_base_price_includes() -> None:
    _, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), max_results=50)
    assert json.loads(recorder.requests[0].content)["numResults"] == 10


@pytest.mark.parametrize(("freshness", "days"), [("day", 1), ("week", 7), ("month", 30), ("year", 365)])
async def test_freshness_is_a_start_published_date_that_long_ago(freshness: str, days: int) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    _, recorder = await search(BUILTIN, lambda request: httpx2.Response(200, json=RESULTS), freshness=freshness)
    after = datetime.now(UTC)
    sent = json.loads(recorder.requests[0].content)["startPublishedDate"]
    assert sent.endswith("Z")
    since = datetime.fromisoformat(sent)
    assert before - timedelta(days=days) <= since <= after - timedelta(days=days)


async def test_no_results_is_an_empty_answer() -> None:
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(200, json={"requestId": "r", "results": []}))
    assert (outcome.kind, outcome.message) == ("empty", "exa found nothing")


async def test_out_of_credits_is_permanent() -> None:
    body = {"requestId": "r", "error": "You have run out of credits", "tag": "NO_MORE_CREDITS"}
    outcome, _ = await search(BUILTIN, lambda request: httpx2.Response(402, json=body))
    assert (outcome.kind, outcome.message) == ("permanent", "exa is out of credits (402)")


def test_it_is_on_only_with_its_key_and_lists_its_price_and_monthly_credits() -> None:
    assert "exa" not in enabled_names(Config(), {})
    assert "exa" in enabled_names(Config(), {"EXA_API_KEY": SECRET})
    # $10 of free credits a month at $0.007 a search: 1,428 whole searches.
    assert (BUILTIN.price_micros, BUILTIN.free_quota_monthly, BUILTIN.premium) == (7_000, 1_428, True)
