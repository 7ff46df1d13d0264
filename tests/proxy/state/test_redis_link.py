"""The shared Redis connection: every command bounded by its timeout, Redis down as a state
logged once per change, recovery without a call, and `config check`'s probe."""

from __future__ import annotations

import logging

import pytest

from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink, shown_url
from tests.pace import deadline
from tests.redis_server import RedisServer, redis_server, replica, until

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def state_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage().split(",")[0]) for r in caplog.records if r.name == "frugal_proxy.state"]


async def test_a_stopped_server_is_degraded_once_and_recovers_by_itself(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "frugal_proxy.state")
    async with replica(redis_server.url) as link:
        assert await link.run(link.client.ping) is True and link.state == "ok"
        with redis_server.stopped():
            with deadline(15):  # one command timeout, then at once: never a hang
                for _ in range(20):
                    assert await link.run(link.client.ping) is UNREACHABLE
            assert link.state == "degraded"
        await until(link, lambda: link.state == "ok")  # the watcher's ping: no call needed
    assert state_lines(caplog) == [
        ("WARNING", "state: redis unreachable"),
        ("INFO", "state: redis answers again; shared state recovered"),
    ]


async def test_a_server_stopped_and_started_again_is_found_again(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        redis_server.stop()
        with deadline(15):
            assert await link.run(link.client.ping) is UNREACHABLE
        redis_server.start()
        await until(link, lambda: link.state == "ok")
        assert await link.run(link.client.ping) is True


async def test_a_refused_connection_is_unreachable_at_once() -> None:
    link = RedisLink("redis://127.0.0.1:1/0", timeout=0.2, connect_timeout=0.2)
    with deadline(5):
        assert await link.run(link.client.ping) is UNREACHABLE
    assert link.state == "degraded"
    await link.aclose()


async def test_the_probe_names_the_version_and_a_round_trip(redis_server: RedisServer) -> None:
    link = RedisLink(redis_server.url)
    version, millis = await link.probe()
    await link.aclose()
    assert version == redis_server.command("INFO", "server").split("redis_version:")[1].split()[0]
    assert millis > 0
    assert link.key("spend", "2026-12-03") == "frugal:spend:2026-12-03"


ECHO = "return ARGV[1]"


async def test_a_queued_read_rides_with_the_next_command_or_is_sent_when_taken(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        echo = link.script(ECHO)
        assert await link.call(echo, [], ["warm"]) == b"warm"  # loaded once
        await link.send(("SET", "k", "v"))
        before = redis_server.calls("get", "evalsha")
        ride = link.ride("GET", "k")
        assert await link.call(echo, [], ["hello"]) == b"hello"
        assert ride.done.is_set() and await link.take(ride) == b"v"  # carried: no command of its own
        alone = link.ride("GET", "missing")
        with deadline(10):
            assert await link.take(alone) is None  # nothing carried it: sent when taken
        assert redis_server.calls("get", "evalsha") == before + 3


async def test_scripts_a_restarted_server_lost_are_loaded_again(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        echo = link.script(ECHO)
        assert await link.call(echo, [], ["before"]) == b"before"
        redis_server.stop()
        redis_server.start()  # empty: no scripts
        await until(link, lambda: link.state == "degraded")  # the watcher's subscription broke
        await until(link, lambda: link.state == "ok")
        ride = link.ride("GET", "k")
        with deadline(10):
            assert await link.call(echo, [], ["after"]) == b"after"
            assert await link.take(ride) is None
        assert link.state == "ok"


async def test_a_queued_read_while_redis_is_stopped_is_unreachable_not_a_hang(redis_server: RedisServer) -> None:
    async with replica(redis_server.url, command_timeout=0.5) as link:
        with redis_server.stopped():
            ride = link.ride("GET", "k")
            with deadline(15):
                assert await link.call(link.script(ECHO), [], ["x"]) is UNREACHABLE
                assert await link.take(ride) is UNREACHABLE
                assert await link.take(link.ride("GET", "k")) is UNREACHABLE  # inside the back-off: at once


async def test_a_script_error_is_a_failed_command_not_a_crash(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        broken = link.script("return redis.call('NOSUCHCOMMAND')")
        ride = link.ride("GET", "k")
        with deadline(10):
            assert await link.call(broken, [], []) is UNREACHABLE
            assert await link.take(ride) is UNREACHABLE
        await until(link, lambda: link.state == "ok")  # Redis itself answers: recovered by the watcher
        assert await link.call(link.script(ECHO), [], ["fine"]) == b"fine"


def test_a_url_is_shown_without_its_credentials_wherever_they_are_written() -> None:
    assert shown_url("redis://user:hunter2@cache:6379/0") == "redis://cache:6379/0"
    assert shown_url("rediss://cache:6380/1?password=hunter2&username=me&ssl_cert_reqs=none") == (
        "rediss://cache:6380/1?password=***&username=***&ssl_cert_reqs=none"
    )
    assert shown_url("unix:///run/redis/redis.sock?db=2") == "unix:///run/redis/redis.sock?db=2"
