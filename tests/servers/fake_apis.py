"""Web APIs on 127.0.0.1 that answer with the shapes their real counterparts document, for the
routed tools' end-to-end tests (run in a thread of the test process; the proxy reaches them
through each provider's `base_url`).

    /wikipedia/w/rest.php/v1/search/page   Wikimedia REST search: {"pages": [{key, title, excerpt}]}
                                           (mediawiki.org/wiki/API:REST_API/Reference#Search_pages);
                                           a query with "nothing" finds nothing
    /held/w/rest.php/v1/search/page        the same search, but a query with "hold" is answered only
                                           once `release` is set (`holding` is set when one arrives):
                                           a paid call kept in flight while a test kills its replica
    /wide/w/rest.php/v1/search/page        the same search shape, `limit` pages of every query, each
                                           with a 1,200-character excerpt; the first one's is 5,000
                                           characters and the second one's key makes a URL of over
                                           8,192 (a wide, oversized answer)
    /down/...                              503 for every request
    /busy/...                              429 with Retry-After: 7
    /unavailable/...                       503 with Retry-After: 120 (RFC 9110 §10.2.3: how long the
                                           service is expected to be unavailable)
    /pages/spa                             a page whose text only JavaScript writes (a near-empty read)
    /pages/js                              an article, readable as it is served (its path says "js")
    /pages/long                            a long article (about 24,000 characters of text)
    /browserless/content                   Browserless's REST `POST /content?token=` with `{url}`:
                                           200 text/html, the rendered DOM
                                           (docs.browserless.io/rest-apis/content)

`requests` counts what each path prefix was asked, so a test can say a provider was not called;
`headers` keeps the request headers the Wikipedia search got, one dict per request (the tracing
tests read the `traceparent` a provider sent).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tests.servers.threaded import serve_in_thread

CORPUS = [
    (
        "Model_Context_Protocol",
        "Model Context Protocol",
        'The <span class="searchmatch">Model Context Protocol</span> links agents to tools',
    ),
    ("Proxy_server", "Proxy server", 'A <span class="searchmatch">proxy</span> sits between a client and a server'),
    ("Frugality", "Frugality", 'The quality of being <span class="searchmatch">frugal</span>'),
]
SPA = (
    "<!doctype html><html><head><title>App</title></head><body><div id='app'>Loading…</div>"
    "<script src='/bundle.js'></script></body></html>"
)
ARTICLE_TEXT = (
    "A proxy between an agent and its tools decides which provider answers each call. "
    "It routes by price first, fails over when a provider errors or finds nothing, and puts "
    "a receipt on every answer so that the agent can see who served it and what it cost. "
)
ARTICLE = (
    "<!doctype html><html><head><title>Routing</title></head><body><article><h1>Routing</h1>"
    + "".join(f"<p>{ARTICLE_TEXT}</p>" for _ in range(3))
    + "</article></body></html>"
)


HELD_SECONDS = 120.0  # a held request is answered then even if no test released it


@dataclass
class FakeApis:
    base: str
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    headers: list[dict[str, str]] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


def _search_pages(request: Request) -> Response:
    query = request.query_params.get("q", "").lower()
    limit = int(request.query_params.get("limit", "50"))
    if "nothing" in query:
        return JSONResponse({"pages": []})
    words = query.split()
    pages = [
        {"id": n, "key": key, "title": title, "excerpt": excerpt, "matched_title": None, "description": None}
        for n, (key, title, excerpt) in enumerate(CORPUS)
        if any(word in excerpt.lower() or word in title.lower() for word in words)
    ]
    return JSONResponse({"pages": pages[:limit]})


WIDE_EXCERPT_CHARS = 1_200
WIDE_FIRST_EXCERPT_CHARS = 5_000
WIDE_LONG_KEY_CHARS = 9_000


def _wide_pages(request: Request) -> Response:
    limit = int(request.query_params.get("limit", "50"))
    pages = []
    for n in range(limit):
        size = WIDE_FIRST_EXCERPT_CHARS if n == 0 else WIDE_EXCERPT_CHARS
        key = "K" * WIDE_LONG_KEY_CHARS if n == 1 else f"Wide_{n}"
        excerpt = (f"hit {n} " + "word " * size)[:size]
        pages.append({"id": n, "key": key, "title": f"Wide {n}", "excerpt": excerpt, "description": None})
    return JSONResponse({"pages": pages})


def _app(apis: FakeApis) -> Starlette:
    counts = apis.requests

    async def wikipedia(request: Request) -> Response:
        counts["wikipedia"] += 1
        apis.headers.append(dict(request.headers))
        return _search_pages(request)

    async def wide(request: Request) -> Response:
        counts["wide"] += 1
        return _wide_pages(request)

    async def held(request: Request) -> Response:
        counts["held"] += 1
        if "hold" in request.query_params.get("q", "").lower():
            apis.holding.set()
            await anyio.to_thread.run_sync(apis.release.wait, HELD_SECONDS)
        return _search_pages(request)

    async def down(request: Request) -> Response:
        counts["down"] += 1
        return Response("upstream failure", status_code=503)

    async def busy(request: Request) -> Response:
        counts["busy"] += 1
        return Response("slow down", status_code=429, headers={"Retry-After": "7"})

    async def unavailable(request: Request) -> Response:
        counts["unavailable"] += 1
        return Response("down for maintenance", status_code=503, headers={"Retry-After": "120"})

    async def spa(request: Request) -> Response:
        counts["spa"] += 1
        return HTMLResponse(SPA)

    async def article(request: Request) -> Response:
        counts["article"] += 1
        return HTMLResponse(ARTICLE)

    async def long_article(request: Request) -> Response:
        counts["long"] += 1
        paragraphs = "".join(f"<p>Part {n}. {ARTICLE_TEXT * 4}</p>" for n in range(24))
        return HTMLResponse(f"<!doctype html><html><body><article><h1>Long</h1>{paragraphs}</article></body></html>")

    async def rendered(request: Request) -> Response:
        counts["browserless"] += 1
        if not request.query_params.get("token"):
            return Response("Unauthorized", status_code=401)
        return HTMLResponse(ARTICLE)

    return Starlette(
        routes=[
            Route("/pages/spa", spa),
            Route("/pages/js", article),
            Route("/pages/long", long_article),
            Route("/browserless/content", rendered, methods=["POST"]),
            Route("/wikipedia/w/rest.php/v1/search/page", wikipedia),
            Route("/held/w/rest.php/v1/search/page", held),
            Route("/wide/w/rest.php/v1/search/page", wide),
            Route("/down/{rest:path}", down, methods=["GET", "POST"]),
            Route("/busy/{rest:path}", busy, methods=["GET", "POST"]),
            Route("/unavailable/{rest:path}", unavailable, methods=["GET", "POST"]),
        ]
    )


@contextmanager
def fake_apis() -> Iterator[FakeApis]:
    apis = FakeApis("")
    with serve_in_thread(_app(apis)) as base:
        apis.base = base
        try:
            yield apis
        finally:
            apis.release.set()  # a request still held ends before the server stops
