"""A provider that is a tool of an upstream MCP server.

The call goes out as `tools/call` through the session's forwarder, which bridges the eras
(MRTR, progress, cancellation); this module only classifies what comes back, keeping an
`UpstreamError`'s own classification (permanent, Retry-After) in the Outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

import msgspec

from frugal_proxy.errors import UpstreamError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import Exchange, Outcome, OutcomeKind, ProgressSink, ProviderSpec, StreamCut
from frugal_proxy.upstream.base import Reached, watching


class Forwarder(Protocol):
    """`UpstreamLink.forward`: a request sent upstream, its reply in the client's era."""

    def __call__(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        on_progress: ProgressSink | None,
        headers: Mapping[str, str] | None = None,
        *,
        on_cut: StreamCut | None = None,
    ) -> Awaitable[Frame]: ...


class McpToolProvider:
    """Serves a route by calling one tool of one upstream: the tool the call names, or with
    `tool`, that one (a candidate of a `[routes.NAME]` route, named `UPSTREAM.TOOL` in receipts).
    A candidate's JSON-RPC error is a fault of that candidate, so the route fails over past it."""

    def __init__(
        self,
        name: str,
        forward: Forwarder,
        price_micros: int = 0,
        *,
        tool: str | None = None,
    ) -> None:
        self.name = name  # the upstream's name
        self.tool = tool
        self.spec = ProviderSpec(name if tool is None else f"{name}.{tool}", "tool", price_micros)
        self._forward = forward
        self._tool_name = jsonrpc.raw(tool) if tool is not None else None

    async def call(self, exchange: Exchange) -> Outcome:
        call = exchange.call
        params = call.params if self._tool_name is None else {**call.params, "name": self._tool_name}
        try:  # the link's deadline bounds it (upstreams.NAME.timeout): an UpstreamTimeout then
            with telling(exchange):
                reply = await self._forward(
                    "tools/call",
                    params,
                    exchange.client,
                    exchange.on_progress,
                    call.forwarded_headers,
                    on_cut=exchange.on_cut,
                )
        except UpstreamError as exc:
            return fault_outcome(exc)
        outcome = self.outcome_of(reply)
        if outcome.kind != "ok":
            exchange.request_state = "refused"  # the upstream's own answer: it refused the call
        return outcome

    def outcome_of(self, reply: Frame) -> Outcome:
        """What the upstream's reply to the call means for the route."""
        # A JSON-RPC error and an isError result both reach the client as the upstream sent
        # them: they are the upstream's own answer, not a fault of the route. A candidate's
        # JSON-RPC error (an unknown tool, bad params for this server) fails over instead.
        if self.tool is not None:
            error = jsonrpc.error_of(reply)
            if error is not None:
                return Outcome("permanent", message=f"{self.spec.name} refused the call ({error[1][:200]})")
        return Outcome("ok", reply=reply)


def telling(exchange: Exchange) -> AbstractContextManager[None]:
    """Around a provider's `tools/call` upstream: the exchange's `request_state` follows the call,
    "unsent" until the upstream's connection is handed it (while the upstream starts, while the
    call waits for the pipe), then "sent" (or "refused", an HTTP failure status), so that dispatch
    can tell whether a paid call cut or left without an answer may have been billed."""
    exchange.request_state = "unsent"

    def reached(state: Reached) -> None:
        exchange.request_state = state

    return watching("tools/call", reached)


def fault_outcome(exc: UpstreamError) -> Outcome:
    """The outcome of a call the upstream did not answer (down, timed out, unreachable)."""
    return Outcome(fault_kind(exc), message=str(exc), retry_after=exc.retry_after)


def fault_kind(exc: UpstreamError) -> OutcomeKind:
    """What an upstream's fault means for the route: `permanent` when retrying cannot help
    (refused credentials), `rate_limited` when the server said when to come back (Retry-After,
    on a 429 or a 503 alike), `transient` for the rest (a dead or unreachable upstream, a server
    error, garbage, a reply over the size cap)."""
    if exc.permanent:
        return "permanent"
    if exc.retry_after is not None:
        return "rate_limited"
    return "transient"
