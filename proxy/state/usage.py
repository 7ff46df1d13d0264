"""How many calls of each provider used its free quota this UTC month, exact under concurrency.

A paid provider with free quota left this month (`free_quota_monthly`) counts as free: the cheap
strategy orders it as such, the ceiling admits it at $0, and while a unit of its quota is held
for a call, that call is billed $0. A call reserves its unit just before the provider is called
and releases it when the provider did not bill (an error, a cancelled call), like the daily
budget's reservations, so N concurrent calls against a quota Q < N bill exactly Q at $0 and the
rest at the list price. The count is per process and in memory (the embedded default); the usage
ledger rebuilds it after a restart (`seed`; reservations wait for it: `seeding`), and a shared
store can stand in for several replicas.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Protocol

from frugal_proxy.state.seeding import Seeding


def utc_month(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m")


class UsageCounter(Protocol):
    def calls_this_month(self, provider: str) -> int:
        """Units of the provider's quota used this month, reservations included."""
        ...

    async def reserve(self, provider: str, quota: int, deadline: float | None = None) -> str | None:
        """Take one unit of the provider's monthly `quota` if any is left: the month it counts
        in, or None when the quota is used up. Async so that a shared store can make it atomic.
        While the counts are rebuilt after a restart it waits, until `deadline` at most (then
        StillSeeding)."""
        ...

    async def release(self, provider: str, month: str) -> None:
        """Give back a unit that was not billed (a no-op once its month is over)."""
        ...


class MemoryUsage:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._month = ""
        self._calls: dict[str, int] = {}
        self.seeding = Seeding()  # reservations wait while the usage ledger is read

    def _roll(self) -> str:
        month = utc_month(self._clock())
        if month != self._month:
            self._month, self._calls = month, {}
        return month

    def calls_this_month(self, provider: str) -> int:
        self._roll()
        return self._calls.get(provider, 0)

    def seed(self, calls: Mapping[str, int], month: str) -> None:
        """The calls each provider billed in `month` before this process started (the usage
        ledger's rebuild); nothing if that month is over by now."""
        if month == self._roll():
            for provider, count in calls.items():
                self._calls[provider] = self._calls.get(provider, 0) + count
        self.seeding.done()

    async def reserve(self, provider: str, quota: int, deadline: float | None = None) -> str | None:
        await self.seeding.wait(deadline)
        # No await between the check and the add: one step on the event loop.
        month = self._roll()
        used = self._calls.get(provider, 0)
        if used >= quota:
            return None
        self._calls[provider] = used + 1
        return month

    async def release(self, provider: str, month: str) -> None:
        if month == self._roll() and self._calls.get(provider, 0) > 0:
            self._calls[provider] -= 1
