"""A provider that is a tool of an upstream MCP server.

The call goes out as `tools/call` through the session's forwarder, which bridges the eras
(MRTR, progress, cancellation); this module only classifies what comes back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.jsonrpc import Frame
from frugal_proxy.records import Exchange, Outcome, ProgressSink

Forwarder = Callable[[str, dict[str, msgspec.Raw], Any, ProgressSink | None], Awaitable[Frame]]


class McpToolProvider:
    """Serves a route by calling one tool of one upstream."""

    def __init__(self, name: str, forward: Forwarder, cost_per_call: float = 0.0) -> None:
        self.name = name
        self.cost_per_call = cost_per_call
        self._forward = forward

    async def call(self, exchange: Exchange) -> Outcome:
        try:
            reply = await self._forward(
                "tools/call", exchange.call.params, exchange.client, exchange.on_progress
            )
        except UpstreamDown as exc:
            return Outcome("transient", message=str(exc))
        except UpstreamError as exc:
            return Outcome("transient", message=str(exc))
        # A JSON-RPC error and an isError result both reach the client as the upstream sent
        # them: they are the upstream's own answer, not a fault of the route.
        return Outcome("ok", reply=reply)
