"""Serper: Google results as JSON. $0.001 a call (`SERPER_API_KEY`, key required).

    POST https://google.serper.dev/search
        X-API-KEY: <key>      Content-Type: application/json
        {"q": "…", "num": N[, "tbs": "qdr:d|qdr:w|qdr:m|qdr:y"]}
    200 {"organic": [{title, link, snippet, position, date?}], "answerBox", "knowledgeGraph",
         "peopleAlsoAsk", "relatedSearches", "searchParameters"}

Freshness goes to `tbs=qdr:d/w/m/y`, Google's own convention; that Serper honours it is
UNCONFIRMED from serper.dev's docs (public client code sends it). `date` is Google's text
("3 days ago", "Jan 5, 2024") and becomes `published` as it is. 429 means rate-limited or out of
credits, with no RateLimit or Retry-After headers (third-party source). Prices (2,500 free
queries once at signup, $50 for 50k credits, `num=100` costing 2 credits) are third-party and
UNCONFIRMED on serper.dev; the free queries are a one-time grant, not a monthly quota.

Sources: open-webui backend/open_webui/retrieval/web/serper.py and LangChain's
GoogleSerperAPIWrapper (endpoint, header, body, `tbs`); public SerperResponse types (response);
api-evangelist/serper serper-rate-limits.yml (limits, prices).
"""

from __future__ import annotations

import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin
from frugal_proxy.providers.web_search import Query, WebSearch

KEY_ENV = "SERPER_API_KEY"
ENDPOINT = "https://google.serper.dev"
MAX_NUM = 100
TBS = {"day": "qdr:d", "week": "qdr:w", "month": "qdr:m", "year": "qdr:y"}


class _Organic(msgspec.Struct):
    link: str
    title: str = ""
    snippet: str | None = None
    date: str | None = None


class _Results(msgspec.Struct):
    organic: list[_Organic] = []


class Serper(WebSearch[_Results]):
    path = "/search"
    method = "POST"
    body = _Results

    def query(self, request: SearchRequest) -> Query:
        body: dict[str, object] = {"q": request.query, "num": min(request.max_results, MAX_NUM)}
        if request.freshness is not None:
            body["tbs"] = TBS[request.freshness]
        return Query(json=body, headers={"X-API-KEY": self.setup.key or ""})

    def hits(self, found: _Results) -> list[SearchHit]:
        return [self.hit(result.title, result.link, result.snippet, result.date) for result in found.organic]


BUILTINS = [
    Builtin(
        "serper",
        "search",
        Serper,
        endpoint=ENDPOINT,
        price_micros=1_000,
        key_env=KEY_ENV,
        key_required=True,
        timeout=20.0,
    )
]
