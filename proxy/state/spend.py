"""What each provider has spent this UTC day, for the daily spend caps, exact under concurrency.

A call reserves a provider's price before it is sent and releases it when the provider did not
bill, so the check and the spend are one step: a call goes ahead only when the day's spend,
reservations included, stays within the cap with its price added, so no number of concurrent
calls takes a provider past its cap (a call that lands exactly on it goes ahead). Amounts are
micro-dollars (money); keys are `capability/provider`, since caps are per capability table.

    SpendBook     the interface: spent (a read for routing), reserve and release (the writes,
                  async so that a shared store can make them atomic across replicas)
    MemorySpend   the embedded default: today's counters in this process, reset at UTC midnight
                  by its injected clock; `seed` adds what the usage ledger says was spent today
                  before the process started, and reservations wait until it has (`seeding`), so
                  no call goes ahead on a counter that is not yet complete
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Protocol

from frugal_proxy.state.seeding import Seeding


def spend_key(capability: str, provider: str) -> str:
    """What a provider's spend and cap are kept under: caps are per capability table."""
    return f"{capability}/{provider}"


def utc_day(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%d")


def seconds_to_midnight(now: float) -> float:
    """Seconds until the next UTC midnight, when the day's counters reset."""
    return 86_400.0 - now % 86_400.0


def period_of(reservation: str) -> str:
    """The UTC day (or month) a reservation counts in. A reservation is what `reserve` returned:
    the period itself in memory, the period and the seeding of its hash on Redis
    (`2026-12-03@9f3a…`); only the store that made it reads the rest."""
    return reservation.partition("@")[0]


class SpendBook(Protocol):
    def spent(self, key: str) -> int:
        """Today's spend of the provider, reservations included."""
        ...

    async def reserve(self, key: str, micros: int, cap: int, deadline: float | None = None) -> str | None:
        """Add `micros` to today's spend if the sum stays within `cap`: the reservation (naming the
        day it counts in, `period_of`), or None when it would pass the cap. While spend is rebuilt
        after a restart it waits, until `deadline` at most (then StillSeeding)."""
        ...

    async def release(self, key: str, micros: int, day: str) -> None:
        """Take back a reservation (what `reserve` returned) that was not billed (a no-op once its
        day is over)."""
        ...


class MemorySpend:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        now = clock()
        self._number, self._day = int(now // 86_400), utc_day(now)  # UTC days have 86,400 s (POSIX time)
        self._spent: dict[str, int] = {}
        self.seeding = Seeding()  # reservations wait while the usage ledger is read

    def _today(self) -> str:
        now = self._clock()
        if int(now // 86_400) != self._number:
            self._number, self._day, self._spent = int(now // 86_400), utc_day(now), {}
        return self._day

    def spent(self, key: str) -> int:
        self._today()
        return self._spent.get(key, 0)

    def seed(self, spent: Mapping[str, int], day: str) -> None:
        """Add what the usage ledger says was spent on `day` before this process started (nothing
        if that day is over by now), and let the waiting reservations go ahead."""
        if day == self._today():
            for key, micros in spent.items():
                self._spent[key] = self._spent.get(key, 0) + micros
        self.seeding.done()

    async def reserve(self, key: str, micros: int, cap: int, deadline: float | None = None) -> str | None:
        await self.seeding.wait(deadline)
        # No await between the check and the add: one step on the event loop.
        day = self._today()
        spent = self._spent.get(key, 0)
        if spent + micros > cap:
            return None
        self._spent[key] = spent + micros
        return day

    async def release(self, key: str, micros: int, day: str) -> None:
        if day == self._today() and key in self._spent:
            self._spent[key] = max(0, self._spent[key] - micros)
