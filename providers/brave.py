"""Brave Search: an independent web index. $5.00 per 1,000 requests ($0.005), with $5 of free
credit a month (about 1,000 requests; a card is needed even for that), `BRAVE_API_KEY`.

    GET https://api.search.brave.com/res/v1/web/search?q=…&count=N[&freshness=pd|pw|pm|py]
        X-Subscription-Token: <key>      Accept: application/json
    200 {"query": {original, more_results_available}, "web": {"results": [{title, url,
         description, extra_snippets?, page_age?, age?, profile{name, img}}]}, …}

`q` is at most 400 characters and 50 words; `count` at most 20 (so a larger `max_results` gets
20). Freshness: day, week, month, year → pd, pw, pm, py. `description` marks the matches with
`<strong>`: the snippet is its text. `published` is `page_age` (a timestamp), else `age` ("2
days ago"). `web` is absent when nothing was found. Only successful requests are billed.

Rate limits ride on every answer: `X-RateLimit-Limit/-Policy/-Remaining/-Reset`, each with a
per-second and a per-month window (`1, 15000`); `X-RateLimit-Reset` is the seconds until each
window resets. A 429 without Retry-After waits the first (per-second) value.

Sources: api-dashboard.search.brave.com/api-reference/web/search/get and
api.search.brave.com/app/documentation/web-search/query (endpoint, auth, params);
api.search.brave.com/app/documentation/web-search/response-headers (rate-limit headers);
api-dashboard.search.brave.com/app/plans (price). The response fields are from third-party
summaries (v50.ai brave-search skill, hivebook).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping

import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin
from frugal_proxy.providers.web_search import Query, WebSearch
from frugal_proxy.records import Outcome

KEY_ENV = "BRAVE_API_KEY"
ENDPOINT = "https://api.search.brave.com"
MAX_COUNT = 20
FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}
_TAG = re.compile(r"<[^>]+>")


class _Result(msgspec.Struct):
    url: str
    title: str = ""
    description: str | None = None
    page_age: str | None = None
    age: str | None = None


class _Web(msgspec.Struct):
    results: list[_Result] = []


class _Answer(msgspec.Struct):
    web: _Web | None = None


class Brave(WebSearch[_Answer]):
    path = "/res/v1/web/search"
    body = _Answer

    def query(self, request: SearchRequest) -> Query:
        params = {"q": request.query, "count": str(min(request.max_results, MAX_COUNT))}
        if request.freshness is not None:
            params["freshness"] = FRESHNESS[request.freshness]
        headers = {"X-Subscription-Token": self.setup.key or "", "Accept": "application/json"}
        return Query(params=params, headers=headers)

    def hits(self, found: _Answer) -> list[SearchHit]:
        results = found.web.results if found.web is not None else []
        return [
            self.hit(_text(result.title), result.url, _text(result.description or ""), result.page_age or result.age)
            for result in results
        ]

    def refine(self, status: int, headers: Mapping[str, str], outcome: Outcome) -> Outcome:
        """A 429 without Retry-After waits until the per-second window resets."""
        if status != 429 or outcome.retry_after is not None:
            return outcome
        first = headers.get("x-ratelimit-reset", "").split(",")[0].strip()
        try:
            wait = float(first)
        except ValueError:
            return outcome
        if not math.isfinite(wait) or wait < 0:
            return outcome
        message = f"{outcome.message}; its per-second window resets in {wait:g} s"
        return Outcome("rate_limited", message=message, retry_after=wait)


def _text(fragment: str) -> str:
    return html.unescape(_TAG.sub("", fragment))


BUILTINS = [
    Builtin(
        "brave",
        "search",
        Brave,
        endpoint=ENDPOINT,
        price_micros=5_000,
        free_quota_monthly=1_000,
        premium=True,
        key_env=KEY_ENV,
        key_required=True,
        timeout=20.0,
    )
]
