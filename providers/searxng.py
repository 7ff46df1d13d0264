"""SearXNG search through an instance's JSON API: free and self-hosted, on when `SEARXNG_URL`
names the instance (its base URL; a config `base_url` replaces it).

    GET {base}/search?q=…&format=json&pageno=1[&time_range=day|week|month|year]
    200 {"query", "number_of_results", "results": [{url, title, content, engine, engines[],
         score, category, publishedDate?}], "answers", "corrections", "infoboxes", …}

There is no result-count parameter (one page is roughly 20 results): the answer is cut to
`max_results`. Freshness goes to `time_range` unchanged: the API doc lists day, month and year,
and SearXNG's own parser (searx/webadapter.py `parse_time_range`) accepts week too; engines
without time-range support sit such a search out. No auth by default.

    403   `json` is not in `search.formats` of the instance's settings.yml (many public
          instances turn it off): permanent, and the message says which setting to change
    429   the bot limiter (`server.limiter`, which a private instance can turn off)

Sources: docs.searxng.org/dev/search_api.html (searxng/searxng docs/dev/search_api.rst);
github.com/searxng/searxng searx/webadapter.py; searxng-docker settings.yml (limiter).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.providers.web_search import Query, WebSearch
from frugal_proxy.records import Outcome

URL_ENV = "SEARXNG_URL"


class _Result(msgspec.Struct):
    url: str
    title: str = ""
    content: str | None = None
    published: str | None = msgspec.field(default=None, name="publishedDate")


class _Results(msgspec.Struct):
    results: list[_Result] = []


class SearXNG(WebSearch[_Results]):
    path = "/search"
    body = _Results

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.base_url = setup.base_url or setup.environ.get(URL_ENV, "").rstrip("/")

    def query(self, request: SearchRequest) -> Query:
        params = {"q": request.query, "format": "json", "pageno": "1"}
        if request.freshness is not None:
            params["time_range"] = request.freshness
        return Query(params=params)

    def hits(self, found: _Results) -> list[SearchHit]:
        return [self.hit(result.title, result.url, result.content, result.published) for result in found.results]

    def refine(self, status: int, headers: Mapping[str, str], outcome: Outcome) -> Outcome:
        if status != 403:
            return outcome
        return Outcome(
            "permanent",
            message=f"{self.spec.name} refused format=json (403): "
            "list json under search.formats in the instance's settings.yml",
        )


def _needs(environ: Mapping[str, str]) -> str | None:
    url = environ.get(URL_ENV, "")
    if url.startswith(("http://", "https://")):
        return None
    return f"set {URL_ENV} to your SearXNG instance's base URL (http://…)"


BUILTINS = [Builtin("searxng", "search", SearXNG, needs=_needs, timeout=20.0)]
