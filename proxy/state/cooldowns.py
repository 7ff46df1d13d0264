"""Which providers are fenced off after a rate limit, and until when (wall-clock seconds).

    CooldownBook       the interface: until (a read on every routed call), fence and lift (async)
    MemoryCooldowns    the embedded default: one deadline per provider in this process

A wall clock and not a monotonic one, so that a shared store can hold the same deadlines for
several replicas. The map holds one entry per configured provider at most.
"""

from __future__ import annotations

from typing import Protocol


class CooldownBook(Protocol):
    def until(self, provider: str) -> float | None:
        """When the provider's fence ends, or None when it has none."""
        ...

    async def fence(self, provider: str, until: float) -> None:
        """Fence the provider off until then (a later fence it already has is kept). Async, so
        that a shared store can tell every replica."""
        ...

    async def lift(self, provider: str) -> None:
        """The provider answered again: no fence."""
        ...


class MemoryCooldowns:
    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def until(self, provider: str) -> float | None:
        return self._until.get(provider)

    async def fence(self, provider: str, until: float) -> None:
        self._until[provider] = max(until, self._until.get(provider, until))

    async def lift(self, provider: str) -> None:
        self._until.pop(provider, None)
