"""The routed tools' answers kept for a while, so that the same question is not paid for twice.

    ResultCache        the interface (async, for a shared store)
    Lookup             a read asked for now and awaited later: `lookup` starts it before the
                       admit phase's first command, so that a shared store sends it in the same
                       round trip as the loop guard's
    MemoryResultCache  the embedded default: at most `max_entries` answers in this process's
                       memory, least recently used out first, each until its TTL; nothing
                       touches disk

Keys are fingerprints (blake3 digests) of everything that changes an answer; the values are the
normalized answers (search hits, a page) and the provider that first served them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class CachedResult:
    provider: str
    data: Any
    stored_at: float
    expires_at: float


class Lookup:
    """The answer kept under a key, read when awaited (or sooner, by a store that batches)."""

    def __init__(self, read: Callable[[], Awaitable[CachedResult | None]]) -> None:
        self._read = read

    def __await__(self) -> Generator[Any, None, CachedResult | None]:
        return self._read().__await__()  # a coroutine only once awaited: one never awaited is no warning


class ResultCache(Protocol):
    async def get(self, key: str) -> CachedResult | None:
        """The live answer kept under `key`, or None."""
        ...

    def lookup(self, key: str) -> Lookup:
        """`get`, asked for now and awaited later: a shared store sends the read with the next
        command of the phase (the loop guard's), in one round trip; never awaiting it is fine."""
        ...

    async def put(self, key: str, provider: str, data: Any, ttl: float) -> None:
        """Keep an answer for `ttl` seconds."""
        ...


class MemoryResultCache:
    def __init__(self, max_entries: int = 512, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, CachedResult] = OrderedDict()

    async def get(self, key: str) -> CachedResult | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires_at <= self.clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def lookup(self, key: str) -> Lookup:
        return Lookup(lambda: self.get(key))

    async def put(self, key: str, provider: str, data: Any, ttl: float) -> None:
        now = self.clock()
        self._entries[key] = CachedResult(provider, data, now, now + ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
