"""The cooldown contract against the memory book and the Redis one, and a fence that one replica
sets seen by another."""

from __future__ import annotations

import logging
import time

import pytest

from frugal_proxy.state.cooldowns import MemoryCooldowns
from frugal_proxy.state.redis_cooldowns import RedisCooldowns
from tests.pace import deadline
from tests.redis_server import RedisServer, backend, redis_server, replica, server, until

__all__ = ["backend", "redis_server", "server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_the_later_fence_is_kept_and_a_lift_clears_it(backend: str, server: RedisServer | None) -> None:
    now = time.time()
    if server is None:
        await _contract(MemoryCooldowns(), now)
        return
    async with replica(server.url) as link:
        await _contract(RedisCooldowns(link), now)


async def _contract(book: MemoryCooldowns | RedisCooldowns, now: float) -> None:
    assert book.until("a") is None
    await book.fence("a", now + 100)
    await book.fence("a", now + 50)
    assert book.until("a") == now + 100
    await book.fence("a", now + 150)
    assert book.until("a") == now + 150
    await book.lift("a")
    await book.lift("never-fenced")
    assert book.until("a") is None


async def test_a_fence_set_on_one_replica_fences_the_provider_on_the_others(redis_server: RedisServer) -> None:
    ends = time.time() + 60
    async with replica(redis_server.url) as one, replica(redis_server.url) as two:
        first, second = RedisCooldowns(one), RedisCooldowns(two)
        await first.fence("serper", ends)
        await until(two, lambda: second.until("serper") == ends)
        await second.lift("serper")
        await until(one, lambda: first.until("serper") is None)
        await first.fence("serper", ends)
    async with replica(redis_server.url) as three:  # a replica started later loads the fence
        third = RedisCooldowns(three)
        with deadline(5):
            await third._reload()
        assert third.until("serper") == ends
    assert 0 < int(redis_server.command("TTL", "frugal:cooldowns")) <= 61


async def test_a_fence_another_replica_set_is_logged_once_where_it_is_seen(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "frugal_proxy.state")
    ends = time.time() + 60
    async with replica(redis_server.url) as one, replica(redis_server.url) as two:
        first, second = RedisCooldowns(one), RedisCooldowns(two)
        await first.fence("serper", ends)
        await first.fence("serper", ends + 30)  # an extension of a live fence: no new line
        await until(two, lambda: second.until("serper") == ends + 30)
    seen = [r for r in caplog.records if r.getMessage() == "state: a cooldown from the fleet"]
    assert [getattr(r, "provider", None) for r in seen] == ["serper"]  # by the replica that did not fence


async def test_a_fence_while_redis_is_stopped_still_fences_this_replica(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        book = RedisCooldowns(link)
        with redis_server.stopped():
            with deadline(15):
                await book.fence("serper", time.time() + 60)
        assert book.until("serper") is not None and link.state == "degraded"
