"""The in-memory result cache: TTLs on its clock, least recently used out first."""

from __future__ import annotations

import pytest

from frugal_proxy.state.result_cache import MemoryResultCache
from tests.fake_clock import Clock

pytestmark = pytest.mark.anyio


async def test_entries_live_their_ttl_and_the_least_recently_used_goes_first() -> None:
    clock = Clock()
    store = MemoryResultCache(max_entries=2, clock=clock)
    await store.put("a", "p", [1], ttl=10)
    await store.put("b", "p", [2], ttl=10)
    assert (await store.get("a")) is not None  # a is now the most recently used
    await store.put("c", "p", [3], ttl=10)
    assert await store.get("b") is None and (await store.get("a")) is not None
    clock.now += 10
    assert await store.get("a") is None and await store.get("c") is None
