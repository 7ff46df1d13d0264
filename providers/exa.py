"""Exa: a search engine built on embeddings, for agents. $7 per 1,000 searches ($0.007) with up
to 10 results each, page highlights included; the Free tier adds $10 of credits every month
(about 1,428 searches), new accounts get $20 once; `EXA_API_KEY`, key required.

    POST https://api.exa.ai/search
        x-api-key: <key>      Content-Type: application/json
        {"query": "…", "type": "auto", "numResults": N, "contents": {"highlights": true}
         [, "startPublishedDate": "<ISO 8601>"]}
    200 {"requestId", "results": [{id, url, title?, publishedDate?, author?, image?, favicon?,
         text?, highlights?: [str], highlightScores?, summary?}], "searchType"?, "costDollars"?}

`numResults` is sent as at most 10: each result past the tenth is billed $0.001 on top, and the
list price here is the flat one. `type` is `auto`, Exa's default, sent so that the price does not
move with the default. Freshness has no parameter of its own: day, week, month and year become
`startPublishedDate`, that long before now (UTC). The snippet is the highlights (sentences Exa
picks for the query), else the summary, else the start of the text; `published` is
`publishedDate`. Rate limit: 10 requests a second on /search; over it, 429 (whether Exa sends
Retry-After is UNCONFIRMED: it is honoured when present). 402 is out of credits or over the key's
budget (permanent).

Sources: exa.ai/docs/reference/search (endpoint, `x-api-key` or Bearer, body, response,
`numResults` up to 100); exa.ai/docs/reference/search-api-guide-for-coding-agents (the minimal
request with `contents.highlights`); exa.ai/docs/admin/pricing and
exa.ai/docs/changelog/pricing-update (price, 10 results included, $1 per 1,000 more, free
credits); exa.ai/docs/reference/rate-limits (10 QPS); exa.ai/docs/reference/error-codes (400,
401, 402, 403, 429, 5xx).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin
from frugal_proxy.providers.web_search import Query, WebSearch

KEY_ENV = "EXA_API_KEY"
ENDPOINT = "https://api.exa.ai"
MAX_RESULTS = 10  # the results a search's base price includes
SNIPPET_CHARS = 500  # of the page text, when Exa sent neither highlights nor a summary
FRESHNESS = {
    "day": timedelta(days=1),
    "week": timedelta(days=7),
    "month": timedelta(days=30),
    "year": timedelta(days=365),
}


class _Result(msgspec.Struct):
    url: str
    title: str | None = None
    published: str | None = msgspec.field(default=None, name="publishedDate")
    highlights: list[str] | None = None
    summary: str | None = None
    text: str | None = None


class _Answer(msgspec.Struct):
    results: list[_Result] = []


class Exa(WebSearch[_Answer]):
    path = "/search"
    method = "POST"
    body = _Answer

    def query(self, request: SearchRequest) -> Query:
        body: dict[str, object] = {
            "query": request.query,
            "type": "auto",
            "numResults": min(request.max_results, MAX_RESULTS),
            "contents": {"highlights": True},
        }
        if request.freshness is not None:
            since = datetime.now(UTC) - FRESHNESS[request.freshness]
            body["startPublishedDate"] = since.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return Query(json=body, headers={"x-api-key": self.setup.key or ""})

    def hits(self, found: _Answer) -> list[SearchHit]:
        return [
            self.hit(result.title or "", result.url, _snippet(result), result.published) for result in found.results
        ]


def _snippet(result: _Result) -> str:
    if result.highlights:
        return " … ".join(result.highlights)
    return result.summary or (result.text or "")[:SNIPPET_CHARS]


BUILTINS = [
    Builtin(
        "exa",
        "search",
        Exa,
        endpoint=ENDPOINT,
        price_micros=7_000,
        free_quota_monthly=1_428,
        premium=True,
        key_env=KEY_ENV,
        key_required=True,
        timeout=20.0,
    )
]
