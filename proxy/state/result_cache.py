"""The routed tools' answers kept for a while, so that the same question is not paid for twice.

    ResultCache        the interface (async, for a shared store)
    MemoryResultCache  the embedded default: at most `max_entries` answers in this process's
                       memory, least recently used out first, each until its TTL; nothing
                       touches disk

Keys are fingerprints (blake3 digests) of everything that changes an answer; the values are the
normalized answers (search hits, a page) and the provider that first served them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class CachedResult:
    provider: str
    data: Any
    stored_at: float
    expires_at: float


class ResultCache(Protocol):
    async def get(self, key: str) -> CachedResult | None:
        """The live answer kept under `key`, or None."""
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

    async def put(self, key: str, provider: str, data: Any, ttl: float) -> None:
        now = self.clock()
        self._entries[key] = CachedResult(provider, data, now, now + ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
