"""The result cache contract against the memory store and the Redis one: an answer stored on one
replica is a hit on another, with its TTL and the bound on entries."""

from __future__ import annotations

import pytest

from frugal_proxy.capabilities import Page, SearchHit
from frugal_proxy.state.redis_cache import RedisResultCache
from frugal_proxy.state.result_cache import MemoryResultCache
from tests.fake_clock import Clock
from tests.pace import deadline
from tests.redis_server import RedisServer, backend, redis_server, replica, server

__all__ = ["backend", "redis_server", "server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

HITS = [SearchHit("A", "https://a.example/", "about a", "serper", published="2026-01-01")]
PAGE = Page("https://a.example/", title="A", markdown="# A")


async def test_an_answer_lives_its_ttl_and_the_oldest_goes_past_max_entries(
    backend: str, server: RedisServer | None
) -> None:
    clock = Clock()
    if server is None:
        await _contract(MemoryResultCache(max_entries=2, clock=clock), clock)
        return
    async with replica(server.url) as link:
        await _contract(RedisResultCache(link, max_entries=2, clock=clock), clock)


async def _contract(store: MemoryResultCache | RedisResultCache, clock: Clock) -> None:
    await store.put("a", "serper", HITS, ttl=10)
    await store.put("b", "jina", PAGE, ttl=10)
    found = await store.get("a")
    assert found is not None and found.provider == "serper" and found.data == HITS
    page = await store.get("b")
    assert page is not None and page.data == PAGE and page.expires_at == clock.now + 10
    await store.put("c", "serper", HITS, ttl=10)
    assert await store.get("c") is not None
    kept = [await store.get(key) for key in ("a", "b")]
    assert sum(found is not None for found in kept) == 1  # two entries at most
    clock.now += 10
    assert await store.get("c") is None


async def test_an_answer_stored_on_one_replica_is_a_hit_on_another(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as one, replica(redis_server.url) as two:
        await RedisResultCache(one).put("q", "serper", HITS, ttl=300)
        found = await RedisResultCache(two).get("q")
        big = RedisResultCache(one, max_entry_bytes=64)
        await big.put("large", "serper", HITS * 10, ttl=300)  # over the per-entry cap: not kept
        assert await big.get("large") is None
    assert found is not None and found.data == HITS
    assert 0 < int(redis_server.command("PTTL", "frugal:cache:q")) <= 300_000


async def test_while_redis_is_stopped_the_cache_misses(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        store = RedisResultCache(link)
        await store.put("q", "serper", HITS, ttl=300)
        with redis_server.stopped():
            with deadline(15):
                assert await store.get("q") is None
                await store.put("r", "serper", HITS, ttl=300)
