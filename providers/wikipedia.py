"""Wikipedia search through the Wikimedia REST API: free, no key, one language per instance.

    GET {base}/w/rest.php/v1/search/page?q=…&limit=N      (base: https://en.wikipedia.org)
    200 {"pages": [{"id", "key", "title", "excerpt", "description", …}]}

`excerpt` is HTML with `<span class="searchmatch">` around the matches; the snippet is its text.
A page's URL is `{base}/wiki/{key}`. Wikimedia asks for a User-Agent naming the client (the
shared client sends one), at most 3 concurrent requests, and Retry-After honoured on 429
(mediawiki.org/wiki/Wikimedia_APIs/Access_policy). There is no freshness parameter: a request
that asks for one is answered all the same, with a warning-free plain search.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import anyio
import msgspec

from frugal_proxy.capabilities import MAX_RESULTS, SearchHit, SearchRequest
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome

ENDPOINT = "https://en.wikipedia.org"
SEARCH_PATH = "/w/rest.php/v1/search/page"
MAX_CONCURRENT = 3  # the access policy's bound
_TAG = re.compile(r"<[^>]+>")


class _Page(msgspec.Struct):
    key: str
    title: str
    excerpt: str | None = None
    description: str | None = None


class _Pages(msgspec.Struct):
    pages: list[_Page]


class Wikipedia:
    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.setup = setup
        self._slots = anyio.CapacityLimiter(MAX_CONCURRENT)

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, SearchRequest)
        name = self.spec.name
        params = {"q": request.query, "limit": str(min(request.max_results, MAX_RESULTS))}
        exchange.request_state = "unsent"  # while it waits for a slot too: nothing has gone out yet
        async with self._slots:
            found = await self.setup.http.fetch_json(
                name,
                "GET",
                self.setup.base_url + SEARCH_PATH,
                _Pages,
                params=params,
                request_timeout=self.setup.timeout,
                call=exchange,
            )
        if isinstance(found, Outcome):
            return found
        hits = [
            SearchHit(
                title=page.title,
                url=f"{self.setup.base_url}/wiki/{quote(page.key, safe='')}",
                snippet=_text(page.excerpt or page.description or ""),
                source=name,
            )
            for page in found.pages[: request.max_results]
        ]
        return Outcome("ok", data=hits) if hits else Outcome("empty", message=f"{name} found nothing")


def _text(fragment: str) -> str:
    return " ".join(html.unescape(_TAG.sub("", fragment)).split())


BUILTINS = [Builtin("wikipedia", "search", Wikipedia, endpoint=ENDPOINT, timeout=15.0)]
