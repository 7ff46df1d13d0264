"""Tavily: a web search API made for agents. A basic search is 1 API credit, $0.008 on
pay-as-you-go (monthly plans $0.0075 to $0.005 a credit), with 1,000 free credits every month
and no card needed; `TAVILY_API_KEY`, key required.

    POST https://api.tavily.com/search
        Authorization: Bearer <key>      Content-Type: application/json
        {"query": "…", "max_results": N, "search_depth": "basic"[, "time_range": "day|week|month|year"]}
    200 {"query", "answer"?, "images", "results": [{title, url, content, score, raw_content?,
         favicon?, published_date?}], "response_time", "usage"?, "request_id"}

`max_results` is at most 20 (so a larger `max_results` gets 20). `search_depth` is sent as
`basic` every time: `advanced` costs 2 credits, and the list price here is one. Freshness goes
to `time_range` as it is. `content` is the snippet (query-relevant chunks of the page);
`published_date` is there for the `news` topic, which is not sent, so `published` is usually
absent. Rate limits: 100 requests a minute on a development key, 1,000 on a production one; over
them, 429 with a `retry-after` header in seconds. Over the plan's credits, Tavily answers its own
432 ("exceeds your plan's set usage limit"), and over a pay-as-you-go cap 433: both permanent.

Sources: docs.tavily.com/api-reference/endpoint/search (endpoint, auth, body, response, credits
per depth); docs.tavily.com/documentation/api-credits (price, free credits);
docs.tavily.com/documentation/rate-limits (limits, 429 + retry-after);
help.tavily.com/articles/8645538886-understanding-http-errors (400, 401, 429, 432, 433, 500);
tavily-ai/skills tavily-best-practices references/search.md (`published_date` with the news
topic: Tavily's own skill, not the API reference).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin
from frugal_proxy.providers.web_search import Query, WebSearch
from frugal_proxy.records import Outcome

KEY_ENV = "TAVILY_API_KEY"
ENDPOINT = "https://api.tavily.com"
MAX_RESULTS = 20
# Tavily's own statuses for a request over what the account may spend.
_OVER_LIMIT = {
    432: "is over its plan's usage limit (432): upgrade the Tavily plan, or wait for next month's credits",
    433: "is over its pay-as-you-go limit (433): raise the limit on the Tavily dashboard",
}


class _Result(msgspec.Struct):
    url: str
    title: str = ""
    content: str | None = None
    published_date: str | None = None


class _Answer(msgspec.Struct):
    results: list[_Result] = []


class Tavily(WebSearch[_Answer]):
    path = "/search"
    method = "POST"
    body = _Answer

    def query(self, request: SearchRequest) -> Query:
        body: dict[str, object] = {
            "query": request.query,
            "max_results": min(request.max_results, MAX_RESULTS),
            "search_depth": "basic",
        }
        if request.freshness is not None:
            body["time_range"] = request.freshness
        return Query(json=body, headers={"Authorization": f"Bearer {self.setup.key or ''}"})

    def hits(self, found: _Answer) -> list[SearchHit]:
        return [self.hit(result.title, result.url, result.content, result.published_date) for result in found.results]

    def refine(self, status: int, headers: Mapping[str, str], outcome: Outcome) -> Outcome:
        """432 and 433 say which of the account's limits the request is over."""
        meaning = _OVER_LIMIT.get(status)
        return outcome if meaning is None else Outcome("permanent", message=f"{self.spec.name} {meaning}")


BUILTINS = [
    Builtin(
        "tavily",
        "search",
        Tavily,
        endpoint=ENDPOINT,
        price_micros=8_000,
        free_quota_monthly=1_000,
        premium=True,
        key_env=KEY_ENV,
        key_required=True,
        timeout=20.0,
    )
]
