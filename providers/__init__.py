"""Things that can execute a call: MCP upstream tools, web APIs, local extractors.

Provider        the seam: a name, a price, and `call(exchange) -> Outcome`
FakeProvider    a provider whose answers come from a handler, for tests
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from frugal_proxy.records import Exchange, Outcome


class Provider(Protocol):
    name: str
    cost_per_call: float

    async def call(self, exchange: Exchange) -> Outcome:
        """Run one attempt; classify any fault in the Outcome instead of raising."""
        ...


class FakeProvider:
    """A provider that answers with whatever its handler returns."""

    def __init__(
        self, name: str, handler: Callable[[Exchange], Awaitable[Outcome]], cost_per_call: float = 0.0
    ) -> None:
        self.name = name
        self.cost_per_call = cost_per_call
        self._handler = handler
        self.calls: list[Exchange] = []

    async def call(self, exchange: Exchange) -> Outcome:
        self.calls.append(exchange)
        return await self._handler(exchange)
