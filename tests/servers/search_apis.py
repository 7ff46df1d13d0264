"""Tavily's and Exa's search APIs on 127.0.0.1, answering with the shapes their API references
document, for `serve`'s routed search end to end (run in a thread of the test process; the proxy
reaches them through each provider's `base_url`).

    POST /tavily/search   Authorization: Bearer <key>, {"query", "max_results", ...}
                          200 {"query", "answer", "images", "results": [{title, url, content,
                          score, raw_content}], "response_time", "request_id"}
                          (https://docs.tavily.com/api-reference/endpoint/search)
    POST /exa/search      x-api-key: <key>, {"query", "numResults", "contents", ...}
                          200 {"requestId", "results": [{id, url, title, publishedDate,
                          highlights, highlightScores}], "costDollars"}
                          (https://exa.ai/docs/reference/search)

Both answer by the query, the way each API answers the same cases:

    a query with "nothing"   200 with no results
    a query with "broken"    500 (help.tavily.com/articles/8645538886-understanding-http-errors,
                             exa.ai/docs/reference/error-codes: a fault on their side)
    a query with "busy"      429 with Retry-After: 7 (docs.tavily.com/documentation/rate-limits)
    any other                the corpus's pages that contain a word of the query

and with 401 to a key that is not `key`, or to every request once `revoked` is set (a key
revoked on the dashboard; the bodies are the ones the docs give). `requests` counts what each
provider was asked, by case.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.servers.threaded import serve_in_thread

CORPUS = [
    ("https://modelcontextprotocol.io/", "Model Context Protocol", "The protocol that links agents to tools"),
    ("https://example.org/proxy", "An MCP proxy", "A proxy routes every tool call by policy"),
]
PUBLISHED = "2025-11-25T00:00:00.000Z"


@dataclass
class SearchApis:
    base: str
    key: str
    revoked: bool = False
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    keys_seen: set[str] = field(default_factory=set)


def _found(query: str) -> list[tuple[str, str, str]]:
    words = query.lower().split()
    return [page for page in CORPUS if any(word in (page[1] + " " + page[2]).lower() for word in words)]


def _case(provider: str, state: SearchApis, key: str, query: str) -> tuple[str, Response | None]:
    """Which case a request is, and the failure it gets (None: answer it)."""
    state.keys_seen.add(key)
    if state.revoked or key != state.key:
        case = "unauthorized"
        body: Any = (
            {"detail": {"error": "Unauthorized: missing or invalid API key."}}
            if provider == "tavily"
            else {"requestId": "r401", "error": "Invalid API key", "tag": "INVALID_API_KEY"}
        )
        failure: Response | None = JSONResponse(body, status_code=401)
    elif "broken" in query:
        case, failure = "broken", JSONResponse({"detail": {"error": "Internal Server Error"}}, status_code=500)
    elif "busy" in query:
        case = "busy"
        failure = JSONResponse(
            {"detail": {"error": "Too many requests"}}, status_code=429, headers={"Retry-After": "7"}
        )
    elif "nothing" in query:
        case, failure = "nothing", None
    else:
        case, failure = "found", None
    state.requests[f"{provider}:{case}"] += 1
    return case, failure


def _app(state: SearchApis) -> Starlette:
    async def tavily(request: Request) -> Response:
        body = await request.json()
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        case, failure = _case("tavily", state, key, body["query"])
        if failure is not None:
            return failure
        pages = [] if case == "nothing" else _found(body["query"])[: body.get("max_results", 5)]
        results = [
            {"title": title, "url": url, "content": text, "score": 0.8, "raw_content": None}
            for url, title, text in pages
        ]
        return JSONResponse(
            {
                "query": body["query"],
                "answer": None,
                "images": [],
                "results": results,
                "response_time": 0.61,
                "request_id": "123e4567-e89b-12d3-a456-426614174111",
            }
        )

    async def exa(request: Request) -> Response:
        body = await request.json()
        case, failure = _case("exa", state, request.headers.get("x-api-key", ""), body["query"])
        if failure is not None:
            return failure
        pages = [] if case == "nothing" else _found(body["query"])[: body.get("numResults", 10)]
        results = [
            {
                "id": url,
                "url": url,
                "title": title,
                "publishedDate": PUBLISHED,
                "author": None,
                "highlights": [text],
                "highlightScores": [0.46],
            }
            for url, title, text in pages
        ]
        return JSONResponse(
            {"requestId": "b5947044c4b78efa9552a7c89b306d95", "results": results, "costDollars": {"total": 0.007}}
        )

    return Starlette(
        routes=[Route("/tavily/search", tavily, methods=["POST"]), Route("/exa/search", exa, methods=["POST"])]
    )


@contextmanager
def search_apis(key: str) -> Iterator[SearchApis]:
    """Serve both APIs on 127.0.0.1, accepting `key`."""
    state = SearchApis("", key)
    with serve_in_thread(_app(state)) as base:
        state.base = base
        yield state
