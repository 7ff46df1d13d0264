"""The loop guard's windows against the memory store and the Redis one, counted over replicas."""

from __future__ import annotations

import time

import pytest

from frugal_proxy.state.call_windows import MemoryCallWindows
from frugal_proxy.state.redis_windows import RedisCallWindows
from tests.pace import deadline
from tests.redis_server import RedisServer, backend, redis_server, replica, server

__all__ = ["backend", "redis_server", "server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_times_slide_out_of_the_window_and_are_bounded(backend: str, server: RedisServer | None) -> None:
    if server is None:
        await _contract(MemoryCallWindows(max_times=3))
        return
    async with replica(server.url) as link:
        await _contract(RedisCallWindows(link, max_times=3))


async def _contract(windows: MemoryCallWindows | RedisCallWindows) -> None:
    assert await windows.note("k", 0.0, 60.0, 2) == [0.0]
    assert await windows.note("k", 30.0, 60.0, 2) == [0.0, 30.0]
    assert await windows.note("k", 60.0, 60.0, 2) == [30.0, 60.0]  # exactly 60 s old: gone
    for at in range(61, 70):
        times = await windows.note("k", float(at), 60.0, 2)
    assert times == [67.0, 68.0, 69.0]  # the last max_times at least
    assert len(await windows.note("other", 1.5, 60.0, 5)) == 1


async def test_identical_calls_on_three_replicas_are_counted_together(redis_server: RedisServer) -> None:
    now = time.time()
    async with replica(redis_server.url) as a, replica(redis_server.url) as b, replica(redis_server.url) as c:
        windows = [RedisCallWindows(link) for link in (a, b, c)]
        seen = [len(await windows[number % 3].note("fingerprint", now + number, 60.0, 6)) for number in range(6)]
    assert seen == [1, 2, 3, 4, 5, 6]
    assert redis_server.command("KEYS", "*") == "frugal:loop:fingerprint"  # the digest, nothing else
    assert 0 < int(redis_server.command("PTTL", "frugal:loop:fingerprint")) <= 60_001


async def test_while_redis_is_stopped_the_windows_count_on_this_replica(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        windows = RedisCallWindows(link)
        with redis_server.stopped():
            with deadline(15):
                assert len(await windows.note("k", 1.0, 60.0, 2)) == 1
                assert len(await windows.note("k", 2.0, 60.0, 2)) == 2
