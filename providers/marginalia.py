"""Marginalia search: an independent index of the small, non-commercial web. Free; zero-key with
the shared `public` key, or your own in `MARGINALIA_API_KEY` (free non-commercial keys by email,
paid and metered commercial ones).

    GET https://api2.marginalia-search.com/search?query=…&count=N
        API-Key: public | <your key>
    200 {"query", "license", "results": [{url, title, description, …}]}

`count` is 1 to 100; there is no freshness or language parameter (a request that asks for
freshness gets a plain search). Results are licensed CC-BY-NC-SA 4.0 unless the key is a
commercial one. The `public` key "often hits a rate limit": the old API answered that with 503;
whether the current one sends 429 or 503 is UNCONFIRMED, so 429 is rate_limited and 503
transient (with a hint to use a key of your own); no Retry-After is documented. Be polite: at
most two requests at a time (SearXNG dropped its Marginalia engine after instances flooded it).

Sources: about.marginalia-search.com/article/api (current API, updated 2025-12-08; the 2023
version for the 503); github.com/searxng/searxng/issues/1620.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin
from frugal_proxy.providers.web_search import Query, WebSearch
from frugal_proxy.records import Outcome

KEY_ENV = "MARGINALIA_API_KEY"
PUBLIC_KEY = "public"
ENDPOINT = "https://api2.marginalia-search.com"
MAX_COUNT = 100


class _Result(msgspec.Struct):
    url: str
    title: str = ""
    description: str | None = None


class _Results(msgspec.Struct):
    results: list[_Result] = []


class Marginalia(WebSearch[_Results]):
    path = "/search"
    body = _Results
    max_concurrent = 2

    def query(self, request: SearchRequest) -> Query:
        params = {"query": request.query, "count": str(min(request.max_results, MAX_COUNT))}
        return Query(params=params, headers={"API-Key": self.setup.key or PUBLIC_KEY})

    def hits(self, found: _Results) -> list[SearchHit]:
        return [self.hit(result.title, result.url, result.description) for result in found.results]

    def refine(self, status: int, headers: Mapping[str, str], outcome: Outcome) -> Outcome:
        if status not in (429, 503) or self.setup.key:
            return outcome
        hint = f"; the shared public key often is: set {KEY_ENV} to a key of your own"
        return Outcome(outcome.kind, message=outcome.message + hint, retry_after=outcome.retry_after)


BUILTINS = [Builtin("marginalia", "search", Marginalia, endpoint=ENDPOINT, key_env=KEY_ENV, timeout=15.0)]
