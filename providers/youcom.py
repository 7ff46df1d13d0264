"""You.com search, two ways: the keyed REST API (`youcom`) and the keyless hosted MCP server
(`youcom-free`).

**youcom**: $5.00 per 1,000 calls ($0.005), key required (`YDC_API_KEY`; new accounts get $100 of
credits once, no card), self-serve 10 req/s.

    GET https://ydc-index.io/v1/search?query=…&count=N[&freshness=day|week|month|year]
        X-API-Key: <key>
    200 {"results": {"web": [{url, title, description, snippets[], page_age?, …}],
                     "news": [{url, title, description, page_age, …}]},
         "metadata": {search_uuid, query, latency}}

`count` is 1 to 100 per section. A 200 can still carry an `error` field (API limits among them):
a fault, not an answer. 402 is out of credits (permanent); 429 asks for backoff (whether it
sends Retry-After is UNCONFIRMED).

**youcom-free**: free, no key, about 100 queries a day. You.com's own MCP server at
`https://api.you.com/mcp?profile=free` (Streamable HTTP), reached through our remote-upstream
client (upstream.http), tool `you-search` with arguments {query, count, freshness?}; its
`structuredContent` is {resultCounts: {web, news, total}, results?: {web?: [{url, title,
page_age?, snippets?}], news?: [{url, title, page_age}]}}; the text block is a formatted
listing (read as JSON only when a server puts JSON there and no structuredContent). A failed
search is an `isError` result with text `Error: …`; the exact text once the day's 100 are used up
is UNCONFIRMED: text naming a limit, a quota or a rate is read as rate_limited, anything else as
transient.

Both normalize web results first, then news, one hit per URL; `published` is `page_age`.

Sources: you.com/docs/agents and /agents/mcp-server.md (endpoints, free profile, 100/day);
you.com/docs/administration/billing (price); you.com/docs/error-handling/error-code-reference.md
(statuses); github.com/youdotcom-oss/dx-toolkit packages/api/src/search/search.schemas.ts,
search.utils.ts, shared/check-response-for-errors.ts (REST shapes, the 200 `error`) and
packages/mcp/src/search/register-search-tool.ts, search.utils.ts, search.schemas.ts (the tool).

The MCP connection's lifetime (see `YoucomFree`): `serve` owns one connection for as long as the
proxy runs; without it, each call opens a connection of its own and closes it.
"""

from __future__ import annotations

import re
from typing import Any

import anyio
import anyio.abc
import msgspec

from frugal_proxy.capabilities import SearchHit, SearchRequest
from frugal_proxy.errors import UpstreamError
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.http_client import unreachable_advice
from frugal_proxy.providers.mcp_tool import fault_kind
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.providers.web_search import Query, WebSearch, answer, hit
from frugal_proxy.records import Exchange, Outcome, OutcomeKind
from frugal_proxy.upstream.base import PROXY_CLIENT_INFO, UpstreamBase
from frugal_proxy.upstream.fleet import UpstreamSpec, connect

KEY_ENV = "YDC_API_KEY"
ENDPOINT = "https://ydc-index.io"
FREE_ENDPOINT = "https://api.you.com"
FREE_PATH = "/mcp?profile=free"
TOOL = "you-search"
MAX_COUNT = 100
_LIMIT = re.compile(r"\b(limit(s|ed)?|rate[- ]limit\w*|quota|too many requests|429)\b", re.IGNORECASE)


class _Result(msgspec.Struct):
    url: str
    title: str = ""
    description: str | None = None
    snippets: list[str] = []
    page_age: str | None = None


class _Sections(msgspec.Struct):
    web: list[_Result] = []
    news: list[_Result] = []


class _Found(msgspec.Struct):
    """The REST answer, and the tool's structuredContent (which has no `error`)."""

    results: _Sections | None = None
    error: Any = None


def _hits(name: str, found: _Found) -> list[SearchHit]:
    """Web results, then news, one hit per URL."""
    sections = found.results or _Sections()
    hits: dict[str, SearchHit] = {}
    for result in (*sections.web, *sections.news):
        snippet = result.description or (result.snippets[0] if result.snippets else "")
        hits.setdefault(result.url, hit(name, result.title, result.url, snippet, result.page_age))
    return list(hits.values())


def _refused(name: str, text: str, secret: str | None = None) -> Outcome:
    """An error You.com put in a well-formed answer: rate_limited when it names a limit."""
    if secret:
        text = text.replace(secret, "…")
    kind: OutcomeKind = "rate_limited" if _LIMIT.search(text) else "transient"
    return Outcome(kind, message=f"{name} answered an error: {' '.join(text.split())[:200]}")


class Youcom(WebSearch[_Found]):
    """The keyed REST API."""

    path = "/v1/search"
    body = _Found

    def query(self, request: SearchRequest) -> Query:
        params = {"query": request.query, "count": str(min(request.max_results, MAX_COUNT))}
        if request.freshness is not None:
            params["freshness"] = request.freshness
        return Query(params=params, headers={"X-API-Key": self.setup.key or ""})

    def hits(self, found: _Found) -> list[SearchHit] | Outcome:
        if found.error is not None:
            error = found.error if isinstance(found.error, str) else msgspec.json.encode(found.error).decode()
            return _refused(self.spec.name, error, self.setup.key)
        return _hits(self.spec.name, found)


# -- the hosted MCP server ------------------------------------------------------------------------


class _Block(msgspec.Struct):
    type: str
    text: str | None = None


class _ToolResult(msgspec.Struct):
    content: list[_Block] = []
    structured: _Found | None = msgspec.field(default=None, name="structuredContent")
    is_error: bool = msgspec.field(default=False, name="isError")


_INITIALIZE = {"protocolVersion": eras.LATEST_HANDSHAKE, "capabilities": {}, "clientInfo": PROXY_CLIENT_INFO}
_MODERN_META = {
    eras.META_VERSION: eras.LATEST_MODERN,
    eras.META_CAPABILITIES: {},
    eras.META_CLIENT_INFO: PROXY_CLIENT_INFO,
}


class YoucomFree:
    """`you-search` of You.com's keyless MCP server, over our own HTTP upstream connection.

    Lifetime. A connection is entered (`async with`) and left in one task, so a long-lived one
    needs a task that lives as long as the proxy: whoever runs providers starts
    `await task_group.start(provider.serve)` and, when done, `await provider.aclose()` (or
    cancels that task group). The connection then reconnects by itself after a failure and is
    shared by every call. Without `serve`, each call opens a connection of its own and closes it
    (correct, a handshake slower).
    """

    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.timeout = setup.timeout
        self.upstream = UpstreamSpec(
            name=setup.spec.name,
            url=setup.base_url + FREE_PATH,
            connect_timeout=min(10.0, setup.timeout),
            read_timeout=setup.timeout,
            lazy=True,
            unreachable_advice=unreachable_advice(setup.spec.name),
        )
        self._connection: UpstreamBase | None = None
        self._init_lock = anyio.Lock()
        self._stop: anyio.Event | None = None
        self._stopped = anyio.Event()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the shared connection until `aclose` (it connects on the first call)."""
        if self._stop is not None:
            raise RuntimeError(f"{self.spec.name} is already being served")
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        try:
            async with connect(self.upstream) as connection:
                self._connection = connection
                task_status.started()
                await self._stop.wait()
        finally:
            self._connection = None
            self._stop = None
            self._stopped.set()

    async def aclose(self) -> None:
        """End `serve` and wait until its connection is closed; harmless when it is not running."""
        if self._stop is not None:
            self._stop.set()
            await self._stopped.wait()

    async def call(self, exchange: Exchange) -> Outcome:
        request = exchange.request
        assert isinstance(request, SearchRequest)
        with anyio.move_on_after(self.timeout):
            if self._connection is not None:
                return await self._attempt(self._connection, request)
            async with connect(self.upstream) as connection:
                return await self._attempt(connection, request)
        return Outcome("transient", message=f"{self.spec.name} did not answer within {self.timeout:g} s")

    async def _attempt(self, connection: UpstreamBase, request: SearchRequest) -> Outcome:
        try:
            reply = await self._search(connection, request)
        except UpstreamError as exc:
            return Outcome(fault_kind(exc), message=str(exc), retry_after=exc.retry_after)
        return _answer(self.spec.name, reply, request.max_results)

    async def _search(self, connection: UpstreamBase, request: SearchRequest) -> Frame:
        await connection.ensure_ready()
        if connection.era == "legacy" and not connection.session_open:
            async with self._init_lock:
                if not connection.session_open:
                    problem = jsonrpc.error_of(await connection.initialize(_INITIALIZE))
                    if problem is not None and connection.era == "legacy":
                        connection.initialize_params = None
                        raise UpstreamError(f"{self.spec.name} refused initialize: {problem[1][:200]}")
        arguments: dict[str, Any] = {"query": request.query, "count": min(request.max_results, MAX_COUNT)}
        if request.freshness is not None:
            arguments["freshness"] = request.freshness
        params: dict[str, Any] = {"name": TOOL, "arguments": arguments}
        if connection.modern:
            params["_meta"] = _MODERN_META
        return await connection.request("tools/call", params)


def _answer(name: str, reply: Frame, max_results: int) -> Outcome:
    problem = jsonrpc.error_of(reply)
    if problem is not None:
        code, text = problem
        # No such tool, or arguments it no longer takes: retrying cannot help.
        kind: OutcomeKind = "permanent" if code in (jsonrpc.METHOD_NOT_FOUND, jsonrpc.INVALID_PARAMS) else "transient"
        return Outcome(kind, message=f"{name}: {TOOL} failed ({code}): {' '.join(text.split())[:200]}")
    try:
        result = msgspec.json.decode(reply["result"], type=_ToolResult)
    except (KeyError, msgspec.DecodeError, msgspec.ValidationError):
        return Outcome("transient", message=f"{name}: {TOOL} answered something else than a tool result")
    text = "\n".join(block.text for block in result.content if block.type == "text" and block.text)
    if result.is_error:
        return _refused(name, text.removeprefix("Error: "))
    found = result.structured if result.structured is not None else _json_text(text)
    if found is None:
        return Outcome("transient", message=f"{name}: {TOOL} answered without its documented results")
    return answer(name, _hits(name, found), max_results)


def _json_text(text: str) -> _Found | None:
    try:
        return msgspec.json.decode(text, type=_Found) if text.lstrip().startswith("{") else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


BUILTINS = [
    Builtin("youcom-free", "search", YoucomFree, endpoint=FREE_ENDPOINT, timeout=30.0),
    Builtin(
        "youcom",
        "search",
        Youcom,
        endpoint=ENDPOINT,
        price_micros=5_000,
        premium=True,
        key_env=KEY_ENV,
        key_required=True,
        timeout=20.0,
    ),
]
