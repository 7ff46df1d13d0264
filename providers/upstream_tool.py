"""A routed capability served by one tool of an upstream MCP server.

    [search_providers.tavily]
    upstream = "tavily"
    tool = "tavily-search"
    args = { query = "{query}", max_results = "{max_results}" }
    results = { path = "results", title = "title", url = "url", snippet = "content" }
    cost_per_call = 0.008

`args` maps the tool's arguments onto the request's fields: a string that is exactly
`{field}` takes the field's value with its type (`{max_results}` stays an integer), any other
string has `{field}`s replaced as text, other values go as they are; a field the request does
not have (`{freshness}` left out) drops the argument. `results` says where the answer's items are:
`path` is a dot path into the result's structuredContent (or, without one, into the JSON of
its first text block), and `title`, `url`, `snippet`, `published` name each item's keys
(defaults: title, url, snippet|content|description, published|date). An extract or browse tool's
answer is read as a page: the keys `markdown` (default: markdown|content|text), `title`, `url`.

The call goes out through the same link as a plain tool (era bridging, progress, cancellation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from frugal_proxy.capabilities import Page, SearchHit
from frugal_proxy.config import ProviderConfig
from frugal_proxy.errors import UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers.mcp_tool import Forwarder, fault_kind, telling
from frugal_proxy.records import Exchange, Outcome, ProviderSpec

_FIELD = re.compile(r"\{([a-z_]+)\}")
_DEFAULT_KEYS = {
    "title": ("title", "name"),
    "url": ("url", "link", "href"),
    "snippet": ("snippet", "content", "description", "text"),
    "published": ("published", "date", "published_date", "page_age"),
    "markdown": ("markdown", "content", "text"),
}


class UpstreamToolProvider:
    def __init__(self, spec: ProviderSpec, options: ProviderConfig, forward: Forwarder) -> None:
        assert options.tool is not None
        self.spec = spec
        self.tool = options.tool
        self.args = dict(options.args)
        self.results = dict(options.results)
        self._forward = forward

    async def call(self, exchange: Exchange) -> Outcome:
        arguments = fill(self.args, msgspec.structs.asdict(exchange.request))
        params = {"name": jsonrpc.raw(self.tool), "arguments": jsonrpc.raw(arguments)}
        if "_meta" in exchange.call.params:  # a 2026-07-28 client's per-request envelope goes on
            params["_meta"] = exchange.call.params["_meta"]
        try:
            with telling(exchange):
                reply = await self._forward(
                    "tools/call", params, exchange.client, exchange.on_progress, None, on_cut=exchange.on_cut
                )
        except UpstreamError as exc:
            kind = fault_kind(exc)
            return Outcome(kind, message=str(exc), retry_after=getattr(exc, "retry_after", None))
        outcome = self._read(exchange, reply)
        if outcome.kind not in ("ok", "empty"):
            exchange.request_state = "refused"  # the tool's own answer (an error, isError, nothing readable)
        return outcome

    def _read(self, exchange: Exchange, reply: Frame) -> Outcome:
        """What the tool's answer means for the capability."""
        name = self.spec.name
        error = jsonrpc.error_of(reply)
        if error is not None:
            return Outcome("permanent", message=f"{name}: the tool {self.tool!r} refused the call ({error[1][:200]})")
        body = jsonrpc.decode_any(reply["result"]) if "result" in reply else None
        if not isinstance(body, dict):
            return Outcome("transient", message=f"{name}: the tool {self.tool!r} answered no result object")
        if body.get("isError"):
            return Outcome("transient", message=f"{name}: the tool {self.tool!r} failed: {_first_text(body)[:200]}")
        found = _payload(body)
        if found is None:
            return Outcome(
                "transient", message=f"{name}: the tool {self.tool!r} answered nothing this mapping can read"
            )
        if self.spec.capability == "search":
            hits = self._hits(_at(found, self.results.get("path", "")))
            return Outcome("ok", data=hits) if hits else Outcome("empty", message=f"{name} found nothing")
        page = self._page(_at(found, self.results.get("path", "")), getattr(exchange.request, "url", ""))
        return Outcome("empty", message=f"{name} read nothing") if page.is_empty() else Outcome("ok", data=page)

    def _pick(self, item: Mapping[str, Any], field: str) -> str | None:
        keys = (self.results[field],) if field in self.results else _DEFAULT_KEYS[field]
        for key in keys:
            value = item.get(key)
            if isinstance(value, str) and value:
                return value
        return None

    def _hits(self, items: Any) -> list[SearchHit]:
        hits: list[SearchHit] = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            url = self._pick(item, "url")
            if url is None:
                continue
            hits.append(
                SearchHit(
                    title=self._pick(item, "title") or url,
                    url=url,
                    snippet=self._pick(item, "snippet") or "",
                    source=self.spec.name,
                    published=self._pick(item, "published"),
                )
            )
        return hits

    def _page(self, value: Any, url: str) -> Page:
        if isinstance(value, str):
            return Page(url=url, markdown=value)
        if not isinstance(value, dict):
            return Page(url=url)
        return Page(
            url=self._pick(value, "url") or url,
            title=self._pick(value, "title"),
            markdown=self._pick(value, "markdown"),
        )


def fill(template: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's arguments from the `args` template and the request's fields."""
    filled: dict[str, Any] = {}
    for key, value in template.items():
        if isinstance(value, str):
            whole = _FIELD.fullmatch(value)
            if whole is not None:
                if fields.get(whole.group(1)) is None:
                    continue  # the request does not have it: leave the argument out
                filled[key] = fields[whole.group(1)]
                continue
            filled[key] = _FIELD.sub(lambda match: str(fields.get(match.group(1), "")), value)
        else:
            filled[key] = value
    return filled


def _payload(body: dict[str, Any]) -> Any:
    structured = body.get("structuredContent")
    if structured is not None:
        return structured
    text = _first_text(body)
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text or None


def _first_text(body: dict[str, Any]) -> str:
    for block in body.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
    return ""


def _at(value: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        value = value.get(part) if isinstance(value, dict) else None
    return value
