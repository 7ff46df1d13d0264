"""How many calls each provider answered this UTC month, for free quotas.

A paid provider with free quota left this month counts as free for the cheap strategy. The
count is per process and in memory (the embedded default); the usage ledger rebuilds it after
a restart once it exists, and a shared store can stand in for several replicas.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Protocol


def utc_month(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m")


class UsageCounter(Protocol):
    def calls_this_month(self, provider: str) -> int: ...

    def count(self, provider: str) -> None:
        """One answered (billed) call of the provider."""
        ...


class MemoryUsage:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._month = ""
        self._calls: dict[str, int] = {}

    def _roll(self) -> None:
        month = utc_month(self._clock())
        if month != self._month:
            self._month, self._calls = month, {}

    def calls_this_month(self, provider: str) -> int:
        self._roll()
        return self._calls.get(provider, 0)

    def count(self, provider: str) -> None:
        self._roll()
        self._calls[provider] = self._calls.get(provider, 0) + 1
