"""The proxy's own tools (`frugal__…`), listed beside the upstreams' and called through the
same pipeline as any other tool.

    OwnTool            a name, a description, schemas and an async handler
    OwnToolProvider    the Provider that runs them (provider name "frugal", free)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Exchange, Outcome, ProviderSpec

PROVIDER_NAME = "frugal"
PREFIX = "frugal__"
# The own tools are fixed for the life of the process: a listing of them alone may be cached an
# hour by anyone. A listing that also holds upstream parts takes the smallest TTL and the
# narrowest scope of its parts.
LISTING_TTL_MS = 3_600_000
LISTING_SCOPE = "public"

Handler = Callable[[dict[str, Any], Exchange], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class OwnTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    output_schema: dict[str, Any] | None = None

    def listing(self) -> dict[str, Any]:
        """The tool as tools/list shows it."""
        entry: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.output_schema is not None:
            entry["outputSchema"] = self.output_schema
        return entry


class ToolArgumentError(ValueError):
    """Arguments the tool cannot use; the message tells the agent what to send instead."""


class OwnToolProvider:
    """Runs the proxy's own tools. Their failures are tool results the agent can read."""

    name = PROVIDER_NAME
    spec = ProviderSpec(PROVIDER_NAME, "tool")

    def __init__(self, tools: Iterable[OwnTool]) -> None:
        self.tools = {tool.name: tool for tool in tools}

    def __contains__(self, name: str) -> bool:
        return name in self.tools

    def listings(self) -> list[dict[str, Any]]:
        return [tool.listing() for tool in self.tools.values()]

    async def call(self, exchange: Exchange) -> Outcome:
        tool = self.tools[exchange.call.tool]
        raw_arguments = exchange.call.params.get("arguments")
        arguments = jsonrpc.decode_any(raw_arguments) if raw_arguments is not None else {}
        if not isinstance(arguments, dict):
            body = jsonrpc.tool_error_result(f"{tool.name}: arguments must be a JSON object")
        else:
            try:
                body = await tool.handler(arguments, exchange)
            except ToolArgumentError as exc:
                body = jsonrpc.tool_error_result(f"{tool.name}: {exc}")
        # A 2026-07-28 client requires resultType; a session-era client ignores the extra field.
        body.setdefault("resultType", "complete")
        return Outcome("ok", reply=jsonrpc.result(None, body))
