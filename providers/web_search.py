"""What the web search drivers share: one request through the shared HTTP client, the answer
normalized onto `SearchHit`, zero hits as `empty`.

    WebSearch   a driver of one search API; a subclass names its `path`, `method` and `body` (the
                documented JSON as a msgspec Struct) and says what goes out (`query`) and what
                came back (`hits`); `refine` reads a failed answer its own way, `max_concurrent`
                bounds its requests in flight
    Query       what goes out besides the URL: params, a JSON body, headers
    hit(...)    one normalized hit: the title falls back to the URL, white space is folded
    answer(...) hits cut to `max_results`: `ok`, or `empty` when there are none

Failures are classified by `HttpClient.fetch_json` (http_client), so a driver has nothing to
catch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.providers.registry import Setup
from frugal_proxy.records import Exchange, Outcome

Body = TypeVar("Body")


@dataclass(frozen=True)
class Query:
    params: Mapping[str, str] | None = None
    json: Any = None
    headers: Mapping[str, str] | None = None


class WebSearch(Generic[Body]):
    """One search API behind the shared HTTP client."""

    path: ClassVar[str]
    method: ClassVar[str] = "GET"
    body: type[Body]
    max_concurrent: ClassVar[int | None] = None

    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.setup = setup
        self.base_url = setup.base_url
        self._slots = anyio.CapacityLimiter(self.max_concurrent) if self.max_concurrent else None

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, SearchRequest)
        query = self.query(request)
        exchange.request_state = "unsent"  # while it waits for a slot too: nothing has gone out yet
        if self._slots is None:
            found = await self._fetch(query, exchange)
        else:
            async with self._slots:
                found = await self._fetch(query, exchange)
        if isinstance(found, Outcome):
            return found
        hits = self.hits(found)
        return hits if isinstance(hits, Outcome) else answer(self.spec.name, hits, request.max_results)

    async def _fetch(self, query: Query, exchange: Exchange) -> Body | Outcome:
        return await self.setup.http.fetch_json(
            self.spec.name,
            self.method,
            self.base_url + self.path,
            self.body,
            params=query.params,
            json=query.json,
            headers=query.headers,
            request_timeout=self.setup.timeout,
            refine=self.refine,
            call=exchange,
        )

    def query(self, request: SearchRequest) -> Query:
        """What the API is sent for this request."""
        raise NotImplementedError

    def hits(self, found: Body) -> list[SearchHit] | Outcome:
        """The hits of a decoded answer, in the API's order; an Outcome for an answer that is a
        fault in disguise (an error field in a 200)."""
        raise NotImplementedError

    def refine(self, status: int, headers: Mapping[str, str], outcome: Outcome) -> Outcome:
        """This API's own reading of a failed answer; the shared classification by default."""
        return outcome

    def hit(self, title: str, url: str, snippet: str | None, published: str | None = None) -> SearchHit:
        return hit(self.spec.name, title, url, snippet, published)


def hit(source: str, title: str, url: str, snippet: str | None, published: str | None = None) -> SearchHit:
    return SearchHit(
        title=" ".join(title.split()) or url,
        url=url,
        snippet=" ".join((snippet or "").split()),
        source=source,
        published=published or None,
    )


def answer(source: str, hits: list[SearchHit], max_results: int) -> Outcome:
    kept = hits[:max_results]
    return Outcome("ok", data=kept) if kept else Outcome("empty", message=f"{source} found nothing")
