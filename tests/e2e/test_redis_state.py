"""Two `serve --http --stateless` replicas on one redis-server, through the SDK client: one daily
cap and one cooldown for both, paid providers skipped with the reason while Redis is stopped
(free ones serve), recovery after it is back, and no Redis round trip on a plain call."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from frugal_proxy.providers import registry
from tests.conftest import notes_command
from tests.e2e.test_http_downstream import Proxy
from tests.pace import deadline, duration, paced
from tests.redis_server import RedisServer, redis_server
from tests.servers.fake_apis import FakeApis, fake_apis

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name != "wikipedia"
)
# The money commands of the Redis stores: scripts, and the hash reads of a reload.
SCRIPTED = ("evalsha", "eval", "script|load", "script", "get", "hgetall", "hexists")


@pytest.fixture
def apis() -> Iterator[FakeApis]:
    with fake_apis() as running:
        yield running


def config(tmp_path: Path, apis: FakeApis, server: RedisServer, paid: str = "/wikipedia") -> Path:
    """wikipedia at $0.0030 a call with a $0.0100 daily cap (three calls fit), every other
    built-in off, the notes server's plain tools beside it."""
    path = tmp_path / "frugal.toml"
    path.write_text(
        f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n"
        f'[search_providers.wikipedia]\nbase_url = "{apis.base}{paid}"\n'
        'cost_per_call = "0.003"\ndaily_budget_usd = "0.01"\n'
        f"{OFF}"
        '[routing]\ncooldown = "90s"\n'
        f'[state]\nbackend = "redis"\nurl = "{server.url}"\n'
        f'timeout = "{duration(0.2)}"\nconnect_timeout = "{duration(0.2)}"\n'
    )
    return path


def replica(path: Path, home: Path) -> Proxy:
    argv = [
        sys.executable,
        "-m",
        "frugal_proxy",
        "serve",
        "--config",
        str(path),
        "--http",
        "127.0.0.1:0",
        "--stateless",
        "--log-level",
        "info",  # the recovery is logged at info
    ]
    proxy = Proxy(argv, {"FRUGAL_HOME": str(home)})
    proxy.wait_listening()
    return proxy


def text(result: Any) -> str:
    return str(result.content[0].text)


async def search(url: str, query: str) -> Any:
    async with Client(url, mode="auto", cache=None) as client:
        return await client.call_tool("frugal__search", {"query": query})


async def test_two_replicas_share_one_daily_cap(tmp_path: Path, apis: FakeApis, redis_server: RedisServer) -> None:
    path = config(tmp_path, apis, redis_server)
    a, b = replica(path, tmp_path / "a"), replica(path, tmp_path / "b")
    try:
        with deadline(90):
            results = [await search((a, b)[number % 2].url, f"proxy {number}") for number in range(5)]
    finally:
        a.stop(), b.stop()
    assert [result.is_error for result in results] == [False, False, False, True, True]
    assert apis.requests["wikipedia"] == 3  # $0.0090 of the $0.0100: a fourth would pass the cap
    assert "budget: skipped wikipedia (it has spent $0.0090 of its $0.0100 daily budget" in text(results[4])
    day = next(key for key in redis_server.command("KEYS", "frugal:spend:*").split())
    assert redis_server.command("HGET", day, "search/wikipedia") == "9000"


async def test_a_429_through_one_replica_fences_the_provider_on_the_other(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    path = config(tmp_path, apis, redis_server, paid="/busy")
    a, b = replica(path, tmp_path / "a"), replica(path, tmp_path / "b")
    try:
        with deadline(90):
            first = await search(a.url, "proxy")
            # The fence reached Redis before A answered; B's mirror gets it by pub/sub.
            second = await search(b.url, "frugal")
    finally:
        a.stop(), b.stop()
    assert "wikipedia is rate-limiting (429)" in text(first)
    assert "cooldown: skipped wikipedia (rate-limited; cooling down for another 1m" in text(second)
    assert apis.requests["busy"] == 1


async def test_no_round_trip_on_a_plain_call_and_while_redis_is_stopped_paid_is_skipped_then_recovers(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    """Plain calls make no Redis command at all (INFO commandstats), a routed one does; then with
    Redis SIGSTOPped, the capped paid provider is skipped with the reason, a plain tool serves,
    /healthz says degraded, each change is logged once, and it all recovers by itself."""
    path = config(tmp_path, apis, redis_server)
    a = replica(path, tmp_path / "a")
    try:
        with deadline(90):
            async with Client(a.url, mode="auto", cache=None) as client:
                await client.call_tool("add", {"a": 1, "b": 2})
                before = redis_server.calls(*SCRIPTED)
                for number in range(10):
                    await client.call_tool("add", {"a": number, "b": 2})
                after = redis_server.calls(*SCRIPTED)
                assert not (await client.call_tool("frugal__search", {"query": "proxy"})).is_error
                routed = redis_server.calls(*SCRIPTED)
            with redis_server.stopped():
                skipped = await search(a.url, "frugal")
                async with httpx2.AsyncClient(timeout=paced(10)) as http:
                    degraded = (await http.get(f"{a.base}/healthz")).json()
                async with Client(a.url, mode="auto", cache=None) as client:
                    plain = await client.call_tool("add", {"a": 1, "b": 2})
            async with httpx2.AsyncClient(timeout=paced(10)) as http:
                # Another process's state, seen over HTTP: asked again until its watcher's next
                # ping (every second) has found Redis back, under the test's deadline.
                while (await http.get(f"{a.base}/healthz")).json()["state"] != "ok":  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            recovered = await search(a.url, "protocol")
    finally:
        a.stop()
    assert after == before and routed > after  # a routed call's reservation and cache do
    assert skipped.is_error and "budget: skipped wikipedia (state: redis unreachable)" in text(skipped)
    assert degraded["state"] == "degraded"
    assert not plain.is_error  # a plain tool needs no shared state
    assert not recovered.is_error and apis.requests["wikipedia"] == 2
    warned = [line for line in a.lines if "going degraded" in line]
    assert len(warned) == 1 and sum("recovered" in line for line in a.lines) == 1
