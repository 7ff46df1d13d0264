"""Routed calls as the guards' tests build them: a frugal__search over named providers, and the
text of a tool error."""

from __future__ import annotations

from typing import Any

from frugal_proxy.capabilities import SearchRequest
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Call, Exchange, Route


def search(*names: str, provider: str | None = None) -> Exchange:
    """A `frugal__search {query: "q"}` routed over `names` (pinned to `provider` if given)."""
    params = {"name": jsonrpc.raw("frugal__search"), "arguments": jsonrpc.raw({"query": "q"})}
    ex = Exchange(Call(1, "frugal__search", params), Route("frugal__search", names, capability="search"))
    ex.request = SearchRequest("q", provider=provider)
    return ex


def error_text(answer: dict[str, Any]) -> str:
    """The text of a tool-error answer."""
    body = jsonrpc.decode_any(answer["result"])
    assert body["isError"] is True
    return str(body["content"][0]["text"])
