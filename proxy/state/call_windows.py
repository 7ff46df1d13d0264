"""When each call fingerprint was seen lately, for the loop guard: a sliding window per key.

Keys are fingerprints (blake3 hex digests of the call), never the call itself. The memory
store is bounded twice: at most MAX_KEYS fingerprints (the least recently seen one goes first)
and the last MAX_TIMES of each (at least the limit it is asked about, so a count up to the limit
is always exact). Times are wall-clock seconds, so that a shared store can hold them for
several replicas.

    CallWindows         the interface (async, for a shared store)
    MemoryCallWindows   the embedded default
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Protocol

MAX_KEYS = 4096
MAX_TIMES = 64


class CallWindows(Protocol):
    async def note(self, key: str, now: float, window: float, keep: int) -> list[float]:
        """Note one call of `key` at `now`: the times of its calls in the last `window` seconds,
        oldest first, this one included (the last `keep` of them at least)."""
        ...


class MemoryCallWindows:
    def __init__(self, max_keys: int = MAX_KEYS, max_times: int = MAX_TIMES) -> None:
        self.max_keys = max_keys
        self.max_times = max_times
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    async def note(self, key: str, now: float, window: float, keep: int) -> list[float]:
        times = self._seen.get(key)
        if times is None:
            times = self._seen[key] = deque(maxlen=max(keep, self.max_times))
            if len(self._seen) > self.max_keys:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(key)
        while times and times[0] <= now - window:
            times.popleft()
        times.append(now)
        return list(times)
