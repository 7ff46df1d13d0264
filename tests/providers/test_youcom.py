"""The You.com drivers: the REST API against its documented shapes, and the keyless hosted MCP
server's `you-search` against a loopback MCP server of that shape, over real HTTP.

REST fixture shapes: github.com/youdotcom-oss/dx-toolkit packages/api/src/search/search.schemas.ts
(`GET https://ydc-index.io/v1/search?query=&count=&freshness=` with `X-API-Key` →
`{results: {web: [{url, title, description, snippets, page_age?, …}], news: [{title,
description, page_age, url, …}]}, metadata: {search_uuid, query, latency}}`),
shared/check-response-for-errors.ts (a 200 with an `error` field), and
you.com/docs/error-handling/error-code-reference.md (401, 402 out of credits, 403, 429, 500).
The MCP server's shapes are in tests/servers/youcom_like_server.py.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn

from frugal_proxy.config import Config
from frugal_proxy.providers import youcom
from frugal_proxy.providers.http_client import unreachable_advice
from frugal_proxy.records import Outcome
from tests.conftest import refusing_port
from tests.pace import deadline
from tests.providers.api_fakes import SECRET, enabled_names, exchange, search, setup_for
from tests.servers import youcom_like_server

pytestmark = pytest.mark.anyio

FREE, REST = youcom.BUILTINS
RESULTS = {
    "results": {
        "web": [
            {
                "url": "https://modelcontextprotocol.io/",
                "title": "Model Context Protocol",
                "description": "An open protocol\nthat connects AI applications to tools.",
                "snippets": ["A longer passage from the page."],
                "page_age": "2025-11-25T00:00:00",
                "thumbnail_url": "https://modelcontextprotocol.io/t.png",
            },
            {"url": "https://example.org/proxy", "title": "An MCP proxy", "description": "", "snippets": ["frugal"]},
        ],
        "news": [
            {
                "title": "MCP news",
                "description": "News.",
                "page_age": "2026-01-02T03:04:05",
                "url": "https://news.example/mcp",
            },
            {"title": "Again", "description": "dup", "page_age": "2026-01-01", "url": "https://example.org/proxy"},
        ],
    },
    "metadata": {"search_uuid": "6f1c", "query": "mcp proxy", "latency": 0.31},
}


# -- the REST API -----------------------------------------------------------------------------------


async def test_rest_hits_are_web_then_news_one_per_url() -> None:
    outcome, recorder = await search(REST, lambda request: httpx2.Response(200, json=RESULTS), max_results=10)
    assert outcome.kind == "ok"
    assert [hit.url for hit in outcome.data] == [
        "https://modelcontextprotocol.io/",
        "https://example.org/proxy",
        "https://news.example/mcp",
    ]
    first, second, news = outcome.data
    assert (first.snippet, first.published, first.source) == (
        "An open protocol that connects AI applications to tools.",
        "2025-11-25T00:00:00",
        "youcom",
    )
    assert (second.snippet, second.published) == ("frugal", None)
    assert news.published == "2026-01-02T03:04:05"
    request = recorder.requests[0]
    assert str(request.url).startswith("https://ydc-index.io/v1/search?")
    assert dict(request.url.params) == {"query": "mcp proxy", "count": "10"}
    assert request.headers["x-api-key"] == SECRET


async def test_rest_freshness_goes_as_it_is() -> None:
    _, recorder = await search(REST, lambda request: httpx2.Response(200, json=RESULTS), freshness="week")
    assert recorder.requests[0].url.params["freshness"] == "week"


async def test_rest_no_results_is_an_empty_answer() -> None:
    outcome, _ = await search(REST, lambda request: httpx2.Response(200, json={"results": {}, "metadata": {}}))
    assert outcome.kind == "empty"


@pytest.mark.parametrize(
    ("error", "kind"),
    [("Monthly API limit exceeded", "rate_limited"), ({"code": "internal", "detail": "try later"}, "transient")],
)
async def test_rest_an_error_field_in_a_200_is_a_fault(error: Any, kind: str) -> None:
    outcome, _ = await search(REST, lambda request: httpx2.Response(200, json={"error": error, "results": {}}))
    assert outcome.kind == kind and "youcom answered an error" in outcome.message


async def test_rest_an_error_that_echoes_the_key_does_not_repeat_it() -> None:
    answer = {"error": f"invalid key {SECRET}"}
    outcome, _ = await search(REST, lambda request: httpx2.Response(200, json=answer))
    assert SECRET not in outcome.message and "invalid key …" in outcome.message


def test_youcom_needs_its_key_and_youcom_free_none() -> None:
    assert "youcom" not in enabled_names(Config(), {}) and "youcom-free" in enabled_names(Config(), {})
    assert "youcom" in enabled_names(Config(), {"YDC_API_KEY": SECRET})


# -- the hosted MCP server, over loopback HTTP -------------------------------------------------------


@asynccontextmanager
async def serving(*, legacy: bool = False) -> AsyncIterator[str]:
    """The You.com-like MCP server on 127.0.0.1 and a free port, in this event loop; its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(youcom_like_server.app(legacy=legacy), log_level="warning", lifespan="on", ws="none")
    server = uvicorn.Server(config)
    youcom_like_server.CALLS.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with deadline(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn says it has started by this flag only
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
    sock.close()


def free_provider(base_url: str, timeout: float | None = None) -> youcom.YoucomFree:
    setup = setup_for(FREE, lambda request: httpx2.Response(500), base_url=base_url)
    provider = FREE.make(setup if timeout is None else dataclasses.replace(setup, timeout=timeout))
    assert isinstance(provider, youcom.YoucomFree)
    return provider


@asynccontextmanager
async def served(base_url: str, call_timeout: float | None = None) -> AsyncIterator[youcom.YoucomFree]:
    """The provider with its shared connection served, as the proxy runs it; closed at the end."""
    provider = free_provider(base_url, call_timeout)
    async with anyio.create_task_group() as tg:
        await tg.start(provider.serve)
        try:
            yield provider
        finally:
            await provider.aclose()


async def free_search(provider: youcom.YoucomFree, query: str, **arguments: Any) -> Outcome:
    return await provider.call(exchange("search", {"query": query, **arguments}))


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "session-era"])
async def test_free_structured_content_becomes_hits(legacy: bool) -> None:
    with deadline(30):
        async with serving(legacy=legacy) as base, served(base) as provider:
            outcome = await free_search(provider, "mcp proxy", max_results=3, freshness="month")
            again = await free_search(provider, "mcp proxy", max_results=1)
            with pytest.raises(RuntimeError, match="already being served"):
                await provider.serve()
    assert outcome.kind == "ok", outcome.message
    assert [(hit.url, hit.published) for hit in outcome.data] == [
        ("https://modelcontextprotocol.io/", "2025-11-25T00:00:00"),
        ("https://example.org/proxy", None),
        ("https://news.example/mcp", "2026-01-02T03:04:05"),
    ]
    first = outcome.data[0]
    assert (first.snippet, first.source) == ("An open protocol that connects AI applications to tools.", "youcom-free")
    assert len(again.data) == 1
    assert youcom_like_server.CALLS == [
        {"query": "mcp proxy", "count": 3, "freshness": "month"},
        {"query": "mcp proxy", "count": 1, "freshness": None},
    ]


async def test_free_without_serve_each_call_has_its_own_connection() -> None:
    with deadline(30):
        async with serving(legacy=True) as base:
            provider = free_provider(base)
            found = await free_search(provider, "mcp proxy")
            text_only = await free_search(provider, "text-only")
            nothing = await free_search(provider, "nothing")
            await provider.aclose()  # harmless when serve never ran
    assert found.kind == "ok" and len(found.data) == 3
    assert text_only.kind == "ok" and text_only.data == found.data
    assert nothing.kind == "empty"


async def test_free_errors_are_classified() -> None:
    with deadline(30):
        async with serving() as base, served(base) as provider:
            limited = await free_search(provider, "daily-limit")
            failed = await free_search(provider, "upstream-fails")
    assert limited.kind == "rate_limited" and "Daily query limit" in limited.message
    assert failed.kind == "transient" and "Error code: 500" in failed.message


async def test_free_a_call_that_outlasts_its_timeout_is_transient() -> None:
    with deadline(30):
        async with serving(legacy=True) as base, served(base, call_timeout=0.5) as provider:
            slow = await free_search(provider, "slow")
            after = await free_search(provider, "mcp proxy")
    assert slow.kind == "transient" and "did not answer within 0.5 s" in slow.message
    assert after.kind == "ok"


async def test_free_an_unreachable_server_is_transient() -> None:
    with refusing_port() as port, deadline(30):
        outcome = await free_search(free_provider(f"http://127.0.0.1:{port}"), "mcp proxy")
    assert outcome.kind == "transient" and "youcom-free" in outcome.message
    # the user wrote no url for the built-in provider: the advice is the network, not the url
    assert "connection refused" in outcome.message and "check the url" not in outcome.message
    assert unreachable_advice("youcom-free") in outcome.message


async def test_free_offline_says_what_was_tried_and_what_to_do() -> None:
    """A name that cannot resolve (RFC 6761 keeps `.invalid` unresolvable), as on a machine
    without a network."""
    with deadline(30):
        outcome = await free_search(free_provider("http://youcom-free.invalid"), "mcp proxy")
    assert outcome.kind == "transient"
    assert "cannot resolve the host of http://youcom-free.invalid/mcp" in outcome.message
    assert "check the url" not in outcome.message
    assert "HTTPS_PROXY" in outcome.message and "set enabled = false for it in the config" in outcome.message


async def test_free_the_endpoint_is_the_free_profile() -> None:
    provider = free_provider("https://api.you.com")
    assert provider.upstream.url == "https://api.you.com/mcp?profile=free"
    assert FREE.endpoint == "https://api.you.com" and FREE.key_env is None and FREE.price_micros == 0
