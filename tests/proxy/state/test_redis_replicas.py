"""The replicas a shared Redis has seen: each check-in listed with its time, the most recent
first; one not seen for a minute dropped at the next beat; nothing listed while Redis is
stopped, and the list back once it answers."""

from __future__ import annotations

import pytest

from frugal_proxy.state.redis_replicas import FORGET_AFTER, UNKNOWN, RedisReplicas
from tests.fake_clock import Clock
from tests.redis_server import RedisServer, redis_server, replica

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_replicas_check_in_and_the_silent_ones_drop_out(redis_server: RedisServer) -> None:
    clock = Clock()
    async with replica(redis_server.url) as one, replica(redis_server.url) as two:
        first, second = RedisReplicas(one, "replica-1", clock), RedisReplicas(two, "replica-2", clock)
        assert await first.seen() == []
        assert await first.beat()
        clock.now += 3
        assert await second.beat()
        assert await first.seen() == [
            {"replica": "replica-2", "seen_at": clock.now, "self": False},
            {"replica": "replica-1", "seen_at": clock.now - 3, "self": True},
        ]
        clock.now += FORGET_AFTER - 1  # replica-1 is now 62 s silent, replica-2 59 s
        assert [entry["replica"] for entry in await second.seen()] == ["replica-2"]
        assert await second.beat()
        assert redis_server.command("ZCARD", "frugal:replicas") == "1"  # the silent one is gone
        assert 0 < int(redis_server.command("TTL", "frugal:replicas")) <= 2 * FORGET_AFTER


async def test_while_redis_is_stopped_the_list_is_unknown(redis_server: RedisServer) -> None:
    async with replica(redis_server.url, command_timeout=0.5) as link:
        replicas = RedisReplicas(link, "replica-1")
        assert await replicas.beat()
        redis_server.pause()
        try:
            assert await replicas.seen() == UNKNOWN  # not None: that is the memory backend's one process
            assert not await replicas.beat()
        finally:
            redis_server.resume()
