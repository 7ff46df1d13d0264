"""The routed capabilities: what an agent asks of `frugal__search`, `frugal__extract` and
`frugal__browse`, and the one normalized shape every provider of a capability answers in.

    SearchRequest  / SearchHit   {query, max_results, freshness?, provider?, max_cost_usd?}
                                 -> {title, url, snippet, published?, source}
    ExtractRequest / Page        {url, formats?, max_chars?, provider?, max_cost_usd?}
    BrowseRequest  / Page        {url, wait_for?, max_chars?, provider?, max_cost_usd?}
                                 -> {url, title?, markdown?, text?, html?}
    ExecuteRequest               {intent, priority?, max_cost_usd?}

`bounded_hits` bounds each hit's fields as an answer shows them (search results are never cut
by the size governor's budgets: max_results is their size knob).

`request_of` turns a call's arguments into the capability's request (a ValueError whose text
tells the agent what to send instead); `TOOLS` lists each routed tool with its schemas. A
provider gets the typed request and answers with hits or a page; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Literal

import msgspec

Capability = Literal["search", "extract", "browse"]
CAPABILITIES: tuple[Capability, ...] = ("search", "extract", "browse")
Freshness = Literal["day", "week", "month", "year"]
Format = Literal["markdown", "text", "html"]
Priority = Literal["cheap", "balanced", "premium"]

MAX_RESULTS = 50
MAX_QUERY_CHARS = 2_000
MAX_URL_CHARS = 8_192
# A search hit as an answer shows it: search results are measured, never cut by the governor's
# budgets (max_results is their size knob), so each field is bounded here instead, so that one
# provider's oversized hit cannot flood an agent's context.
MAX_TITLE_CHARS = 512
MAX_SNIPPET_CHARS = 2_000
MAX_PUBLISHED_CHARS = 64


class SearchRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    query: str
    max_results: int = 5
    freshness: Freshness | None = None
    provider: str | None = None
    max_cost_usd: Decimal | None = None

    def __post_init__(self) -> None:
        _check_text(self.query, "query")
        if not 1 <= self.max_results <= MAX_RESULTS:
            raise ValueError(f"max_results is 1 to {MAX_RESULTS}")
        _check_ceiling(self.max_cost_usd)


class ExtractRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    url: str
    formats: tuple[Format, ...] = ("markdown",)
    max_chars: int | None = None
    provider: str | None = None
    max_cost_usd: Decimal | None = None

    def __post_init__(self) -> None:
        _check_url(self.url)
        if not self.formats:
            raise ValueError("formats needs at least one of markdown, text, html")
        _check_max_chars(self.max_chars)
        _check_ceiling(self.max_cost_usd)


class BrowseRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    url: str
    wait_for: str | None = None  # a CSS selector to wait for before the page is read
    max_chars: int | None = None
    provider: str | None = None
    max_cost_usd: Decimal | None = None

    def __post_init__(self) -> None:
        _check_url(self.url)
        if self.wait_for is not None and not (0 < len(self.wait_for) <= 512):
            raise ValueError("wait_for is a CSS selector of 1 to 512 characters")
        _check_max_chars(self.max_chars)
        _check_ceiling(self.max_cost_usd)


class ExecuteRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    intent: str
    priority: Priority | None = None
    max_cost_usd: Decimal | None = None

    def __post_init__(self) -> None:
        _check_text(self.intent, "intent")
        _check_ceiling(self.max_cost_usd)


Request = SearchRequest | ExtractRequest | BrowseRequest


def normalized(request: msgspec.Struct, *, ceiling: bool = True) -> msgspec.Struct:
    """The request as far as its answer depends on it, for fingerprints: the query and the URL
    trimmed, the provider's spelling folded; without `max_cost_usd` unless `ceiling`."""
    changes: dict[str, Any] = {} if ceiling else {"max_cost_usd": None}
    for name in ("query", "url", "provider"):
        value = getattr(request, name, None)
        if isinstance(value, str):
            changes[name] = value.strip().casefold() if name == "provider" else value.strip()
    return msgspec.structs.replace(request, **changes) if changes else request


def browse_from(request: ExtractRequest) -> BrowseRequest:
    """The browse request an extraction falls forward to (same page, same ceiling)."""
    return BrowseRequest(url=request.url, max_chars=request.max_chars, max_cost_usd=request.max_cost_usd)


class SearchHit(msgspec.Struct, frozen=True, omit_defaults=True):
    title: str
    url: str
    snippet: str
    source: str  # the provider that found it
    published: str | None = None


def bounded_hits(hits: Sequence[SearchHit]) -> tuple[list[SearchHit], int]:
    """The hits as an answer shows them, and how many were left out: a title, snippet or date
    over its bound is cut and ended with "…"; a hit whose URL is over `MAX_URL_CHARS` is left out
    (a cut URL would point somewhere else)."""
    kept: list[SearchHit] = []
    for hit in hits:
        if len(hit.url) > MAX_URL_CHARS:
            continue
        title, snippet = _ended(hit.title, MAX_TITLE_CHARS), _ended(hit.snippet, MAX_SNIPPET_CHARS)
        published = _ended(hit.published, MAX_PUBLISHED_CHARS) if hit.published is not None else None
        if title is not hit.title or snippet is not hit.snippet or published is not hit.published:
            hit = msgspec.structs.replace(hit, title=title, snippet=snippet, published=published)
        kept.append(hit)
    return kept, len(hits) - len(kept)


def _ended(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


class Page(msgspec.Struct, frozen=True, omit_defaults=True):
    url: str
    title: str | None = None
    markdown: str | None = None
    text: str | None = None
    html: str | None = None

    def is_empty(self, min_chars: int = 1) -> bool:
        """Whether the page holds less readable text than `min_chars` (a near-empty page)."""
        body = self.markdown or self.text or ""
        return len(body.strip()) < min_chars


def _check_text(value: str, name: str) -> None:
    if not value.strip():
        raise ValueError(f"{name} must not be empty")
    if len(value) > MAX_QUERY_CHARS:
        raise ValueError(f"{name} has at most {MAX_QUERY_CHARS} characters")


def _check_url(url: str) -> None:
    if not url.startswith(("http://", "https://")) or len(url) > MAX_URL_CHARS:
        raise ValueError(f"url must be an http:// or https:// URL of at most {MAX_URL_CHARS} characters")


def _check_max_chars(value: int | None) -> None:
    if value is not None and value < 0:
        raise ValueError("max_chars must not be negative (0 is no cap)")


def _check_ceiling(value: Decimal | None) -> None:
    if value is not None and (not value.is_finite() or value < 0 or value.adjusted() > 6):
        raise ValueError("max_cost_usd is an amount of US dollars, 0 or more (0: free providers only)")


_REQUESTS: dict[str, type[msgspec.Struct]] = {
    "search": SearchRequest,
    "extract": ExtractRequest,
    "browse": BrowseRequest,
    "execute": ExecuteRequest,
}


def request_of(kind: str, arguments: Any) -> Any:
    """The typed request of a routed tool's arguments; ValueError with what to send instead."""
    if not isinstance(arguments, dict):
        raise ValueError("arguments must be a JSON object")
    # A ceiling may come as a JSON number; keep it exact by way of its text, never a float sum.
    if isinstance(arguments.get("max_cost_usd"), float | int) and not isinstance(arguments["max_cost_usd"], bool):
        arguments = {**arguments, "max_cost_usd": str(arguments["max_cost_usd"])}
    try:
        return msgspec.convert(arguments, _REQUESTS[kind], strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(_readable(str(exc))) from None


def _readable(message: str) -> str:
    """msgspec's "Invalid enum value 'hour' - at `$.freshness`" as "freshness: invalid value 'hour'"."""
    text, sep, at = message.rpartition(" - at `$.")
    text = (text if sep else message).replace("Object contains unknown field", "unknown argument")
    text = text.replace("Invalid enum value", "invalid value")
    return f"{at.rstrip('`')}: {text}" if sep else text


# -- the tools ------------------------------------------------------------------------------------

_CEILING = {
    "type": "number",
    "minimum": 0,
    "description": "The most this call may cost in US dollars; providers priced above it are "
    "skipped before anything is called. 0 means free providers only.",
}
_PROVIDER = {"type": "string", "description": "Use only this provider (it is tried alone, no failover)."}
_MAX_CHARS = {
    "type": "integer",
    "minimum": 0,
    "description": "Cut the page's text to this many characters (0: no cap); the default is the server's.",
}

_ATTEMPT = {
    "type": "object",
    "properties": {
        "provider": {"type": "string"},
        "outcome": {"type": "string", "enum": ["won", "empty", "error"]},
        "error_kind": {"type": "string"},
        "error": {"type": "string"},
        "latency_ms": {"type": "number"},
        "cost_usd": {"type": "number"},
        "retries": {"type": "integer"},
        "free_quota": {"type": "boolean"},
        "maybe_billed": {"type": "boolean"},
    },
    "required": ["provider", "outcome", "latency_ms", "cost_usd"],
}
_RECEIPT_PROPERTIES: dict[str, Any] = {
    "provider_used": {"type": ["string", "null"]},
    "cost_usd": {"type": "number"},
    "latency_ms": {"type": "number"},
    "attempts": {"type": "array", "items": _ATTEMPT},
    "total_cost_usd": {"type": "number"},
    "est_tokens": {"type": "integer"},
    # A page's answer: its content characters (markdown, text, html) returned and in all.
    "chars_returned": {"type": "integer"},
    "chars_total": {"type": "integer"},
    "truncated": {"type": "boolean"},
    "reason": {"type": "string"},
    "warnings": {"type": "array", "items": {"type": "string"}},
    "cached": {"type": "boolean"},
    "cache_age_ms": {"type": "number"},
    "skipped": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"provider": {"type": "string"}, "guard": {"type": "string"}, "why": {"type": "string"}},
        },
    },
}
RECEIPT_REQUIRED = ["provider_used", "cost_usd", "latency_ms", "attempts", "total_cost_usd", "est_tokens"]
_HIT = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "url": {"type": "string"},
        "snippet": {"type": "string"},
        "published": {"type": "string"},
        "source": {"type": "string"},
    },
    "required": ["title", "url", "snippet", "source"],
}
_PAGE = {
    "type": "object",
    "properties": {
        "url": {"type": "string"},
        "title": {"type": "string"},
        "markdown": {"type": "string"},
        "text": {"type": "string"},
        "html": {"type": "string"},
    },
    "required": ["url"],
}


def _output(body: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {**body, **_RECEIPT_PROPERTIES},
        "required": [*required, *RECEIPT_REQUIRED],
    }


TOOLS: dict[str, dict[str, Any]] = {
    "search": {
        "name": "frugal__search",
        "description": "Search the web through the cheapest capable provider, with failover. Answers "
        "{results: [{title, url, snippet, published?, source}]} and a receipt: who served it, what it "
        "cost, every attempt.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "default": 5},
                "freshness": {"type": "string", "enum": ["day", "week", "month", "year"]},
                "provider": _PROVIDER,
                "max_cost_usd": _CEILING,
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "outputSchema": _output({"results": {"type": "array", "items": _HIT}}, ["results"]),
    },
    "extract": {
        "name": "frugal__extract",
        "description": "Read one web page as markdown (or text, or HTML) through the cheapest capable "
        "provider, with failover. Answers {page: {url, title?, markdown?, text?, html?}} and a receipt.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http(s) URL of the page."},
                "formats": {"type": "array", "items": {"type": "string", "enum": ["markdown", "text", "html"]}},
                "max_chars": _MAX_CHARS,
                "provider": _PROVIDER,
                "max_cost_usd": _CEILING,
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        "outputSchema": _output({"page": _PAGE}, ["page"]),
    },
    "browse": {
        "name": "frugal__browse",
        "description": "Render one web page in a browser (for pages that need JavaScript) and read it "
        "as markdown, through the cheapest capable provider. Answers {page: {...}} and a receipt.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The http(s) URL of the page."},
                "wait_for": {"type": "string", "description": "A CSS selector to wait for before reading."},
                "max_chars": _MAX_CHARS,
                "provider": _PROVIDER,
                "max_cost_usd": _CEILING,
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        "outputSchema": _output({"page": _PAGE}, ["page"]),
    },
}
EXECUTE_TOOL: dict[str, Any] = {
    "name": "frugal__execute",
    "description": "Say what you need in plain words; it is routed to a web search, a page read or a "
    "browser render by the cues in it (a URL, 'render', 'javascript' …), with no model call. A page "
    "whose text needs JavaScript falls forward from a read to a render, costs summed. Answers like the "
    "routed tool it chose, plus `capability`.",
    "inputSchema": {
        "type": "object",
        "properties": {
            "intent": {"type": "string", "description": "What you need, e.g. 'latest MCP spec changes' or a URL."},
            "priority": {
                "type": "string",
                "enum": ["cheap", "balanced", "premium"],
                "description": "cheap: lowest cost first; balanced: the configured strategy (the default); "
                "premium: premium providers first.",
            },
            "max_cost_usd": _CEILING,
        },
        "required": ["intent"],
        "additionalProperties": False,
    },
    "outputSchema": _output(
        {
            "capability": {"type": "string", "enum": list(CAPABILITIES)},
            "results": {"type": "array", "items": _HIT},
            "page": _PAGE,
        },
        ["capability"],
    ),
}
# balanced: the capability's configured strategy (`routing.<capability>.strategy`), as routed without one.
STRATEGY_OF_PRIORITY: dict[str, str | None] = {"cheap": "cheap", "balanced": None, "premium": "premium"}
TOOL_NAMES = {capability: tool["name"] for capability, tool in TOOLS.items()}
# What the size governor keeps a routed answer's payload valid against, before the receipt is added.
PAYLOAD_SCHEMAS: dict[str, dict[str, Any]] = {
    "search": {"type": "object", "properties": {"results": {"type": "array", "items": _HIT}}, "required": ["results"]},
    "extract": {"type": "object", "properties": {"page": _PAGE}, "required": ["page"]},
    "browse": {"type": "object", "properties": {"page": _PAGE}, "required": ["page"]},
}
CAPABILITY_OF_TOOL = {name: capability for capability, name in TOOL_NAMES.items()}
