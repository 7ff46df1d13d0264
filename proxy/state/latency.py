"""This machine's observed latency of each provider's successful calls, for the fast strategy.

An exponentially weighted moving average per provider (alpha 0.3: the last few calls weigh
most), with the number of samples behind it; in memory, the embedded default.
"""

from __future__ import annotations

from typing import Protocol

ALPHA = 0.3


class LatencyBook(Protocol):
    def observe(self, provider: str, latency_ms: float) -> None: ...

    def estimate(self, provider: str) -> tuple[float, int] | None:
        """(average ms, samples), or None without history."""
        ...


class MemoryLatency:
    def __init__(self) -> None:
        self._book: dict[str, tuple[float, int]] = {}

    def observe(self, provider: str, latency_ms: float) -> None:
        known = self._book.get(provider)
        if known is None:
            self._book[provider] = (latency_ms, 1)
        else:
            average, samples = known
            self._book[provider] = (average + ALPHA * (latency_ms - average), samples + 1)

    def estimate(self, provider: str) -> tuple[float, int] | None:
        return self._book.get(provider)
