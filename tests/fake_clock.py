"""A wall clock that tests move by hand (for TTLs, expiry and eviction)."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now
