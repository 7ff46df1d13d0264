"""Things that can execute a call: MCP upstream tools, web APIs, local extractors.

Provider        the seam: a `spec` (name, capability, price …) and `call(exchange) -> Outcome`
FakeProvider    a provider whose answers come from a handler, for tests
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from frugal_proxy.records import Exchange, Outcome, ProviderSpec


class Provider(Protocol):
    spec: ProviderSpec

    async def call(self, exchange: Exchange) -> Outcome:
        """Run one attempt; classify any fault in the Outcome instead of raising."""
        ...


class FakeProvider:
    """A provider that answers with whatever its handler returns."""

    def __init__(
        self,
        name: str,
        handler: Callable[[Exchange], Awaitable[Outcome]],
        price_micros: int = 0,
        *,
        capability: str = "tool",
        premium: bool = False,
        free_quota_monthly: int = 0,
    ) -> None:
        self.spec = ProviderSpec(name, capability, price_micros, free_quota_monthly=free_quota_monthly, premium=premium)
        self._handler = handler
        self.calls: list[Exchange] = []

    @property
    def name(self) -> str:
        return self.spec.name

    async def call(self, exchange: Exchange) -> Outcome:
        self.calls.append(exchange)
        return await self._handler(exchange)
