"""Three `serve --http --stateless` replicas behind HAProxy keeping one set of books on one
redis-server (tests/e2e/fleet.py with tests/redis_server.py's fixture), the SDK client in
front, a loopback Wikipedia search priced $0.0030 with a $0.0100 daily cap (three calls fit):

- 100 concurrent calls spread over the replicas reach the provider at most cap + one price
  (the fake's own counter), and the receipts, Redis's spend hash and the three ledgers agree to
  the micro-dollar;
- a 429 through one replica fences the provider on all three;
- the loop guard counts fleet-wide: five identical calls spread over the replicas, the sixth is
  refused wherever it lands;
- kill -9 of a replica holding a paid call in flight: the survivors and its restart keep to
  the cap;
- 20 concurrent calls against a free quota of 5 bill exactly 5 at $0 fleet-wide, and the
  receipts, Redis's usage hash and the ledgers agree;
- Redis stopped and started again (empty), and Redis SIGSTOPped for 10 s, mid-run: every call
  answers, the capped paid provider is skipped with `state: redis unreachable` while a plain tool
  serves, each replica's /healthz says degraded, each logs the change once each way, and after
  recovery the cap holds exactly (rebuilt from the ledgers after the restart).

Each of the first five fails with the memory backend (each replica its own books: 9 paid calls,
3 fences, two loops of five, 15 calls at $0). Which replica served a call is read from the
replicas' ledger files."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from frugal_proxy.ledger.line import micros
from tests.conftest import notes_command
from tests.e2e.fleet import WAIT, Fleet, Replica, running_fleet, start_replica
from tests.e2e.test_redis_state import OFF
from tests.pace import deadline, paced
from tests.redis_server import RedisServer, redis_server
from tests.servers.fake_apis import FakeApis, fake_apis

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

PRICE, CAP = 3000, 10000  # micro-dollars
SPENT = "search/wikipedia"  # the spend hash's field for the provider


@pytest.fixture
def apis() -> Iterator[FakeApis]:
    with fake_apis() as running:
        yield running


def paid_config(tmp_path: Path, apis: FakeApis, path: str = "wikipedia", cache: bool = False) -> Path:
    """wikipedia (at `path` of the fake) at $0.0030 with a $0.0100 daily cap, every other
    built-in off; a long loop window and cooldown, so that a slow machine stays inside them."""
    config = tmp_path / "frugal.toml"
    config.write_text(
        f'[search_providers.wikipedia]\nbase_url = "{apis.base}/{path}"\n'
        'cost_per_call = "0.003"\ndaily_budget_usd = "0.01"\n'
        f"{OFF}"
        '[routing]\ncooldown = "10m"\nloop_window = "10m"\n'
        f"[cache]\nenabled = {str(cache).lower()}\n"
    )
    return config


def text(result: Any) -> str:
    return str(result.content[0].text)


def receipt_micros(result: Any) -> int:
    """What the call's receipt says it cost (0 for a call no provider served)."""
    body = result.structured_content or {}
    return int(Decimal(str(body.get("cost_usd", 0))) * 1_000_000)


def spend(server: RedisServer) -> int:
    """The provider's spend today in Redis, in micro-dollars."""
    [day] = server.command("KEYS", "frugal:spend:*").split()
    return int(server.command("HGET", day, SPENT) or 0)


def client(url: str) -> Client:
    return Client(url, mode="auto", cache=None)


async def searches(url: str, count: int) -> list[Any]:
    """`count` different paid searches at once on one client; their results."""
    results: list[Any] = []
    async with client(url) as session:

        async def one(n: int) -> None:
            results.append(await session.call_tool("frugal__search", {"query": f"proxy {n}"}))

        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
    return results


async def seen(replica: Replica, *parts: str) -> None:
    """Wait (off the event loop) for `replica` to log a line holding every one of `parts`."""
    await anyio.to_thread.run_sync(lambda: replica.proxy.wait_for_line(*parts, timeout=WAIT))


async def served_by(fleet: Fleet, call: Any) -> tuple[str, Any]:
    """Make one call; return the replica that wrote its ledger line, and the result."""
    before = fleet.counts()
    result = await call()
    after = await anyio.to_thread.run_sync(fleet.wait_lines, sum(before.values()) + 1)
    [replica] = [name for name in after if after[name] > before[name]]
    return replica, result


async def test_100_concurrent_paid_calls_over_three_replicas_keep_to_one_cap(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    with running_fleet(tmp_path, paid_config(tmp_path, apis), "--stateless", redis=redis_server) as fleet:
        with deadline(200):
            results = await searches(fleet.front, 100)
            counts = await anyio.to_thread.run_sync(fleet.wait_lines, 100)
        ledgers = [line for replica in fleet.replicas for line in fleet.lines(replica)]
    served = apis.requests["wikipedia"]
    assert 0 < served * PRICE <= CAP + PRICE, served  # the fake's own count, fleet-wide
    assert all(counts.values()), counts  # every replica took calls
    assert len(results) == 100 and sum(not result.is_error for result in results) == served
    refused = [text(result) for result in results if result.is_error]
    # "it has spent $0.0090 of its $0.0100 daily budget", or, while calls are in flight, what
    # other calls' reservations left of it
    assert all("budget: skipped wikipedia (" in why and "daily budget" in why for why in refused), refused[:3]
    receipts = sum(receipt_micros(result) for result in results)
    assert receipts == spend(redis_server) == sum(micros(line["cost_usd"]) for line in ledgers) == served * PRICE


async def test_a_429_through_one_replica_fences_the_provider_on_all(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    config = paid_config(tmp_path, apis, path="busy")
    with running_fleet(tmp_path, config, "--stateless", "--log-level", "info", redis=redis_server) as fleet:
        with deadline(200):
            async with client(fleet.front) as session:
                fenced_by, first = await served_by(fleet, lambda: session.call_tool("frugal__search", {"query": "a"}))
                assert redis_server.command("HEXISTS", "frugal:cooldowns", "wikipedia") == "1"
                # The event that the fence arrived: each other replica logs it once, from pub/sub.
                for other in fleet.replicas:
                    if other.id != fenced_by:
                        await seen(other, "state: a cooldown from the fleet", "provider=wikipedia")
                answered: dict[str, list[str]] = {}
                for n in range(30):  # round-robin: each replica in a few calls; bounded
                    replica, result = await served_by(
                        fleet, lambda n=n: session.call_tool("frugal__search", {"query": f"b {n}"})
                    )
                    answered.setdefault(replica, []).append(text(result))
                    if len(answered) == 3:
                        break
    assert "wikipedia is rate-limiting (429)" in text(first)
    assert sorted(answered) == sorted(replica.id for replica in fleet.replicas), answered
    for replica, texts in answered.items():
        assert all("cooldown: skipped wikipedia (rate-limited; cooling down for another" in t for t in texts), replica
    assert apis.requests["busy"] == 1, fenced_by  # no other replica asked it again


async def test_the_loop_guard_counts_identical_calls_over_the_whole_fleet(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    with running_fleet(tmp_path, paid_config(tmp_path, apis, cache=True), "--stateless", redis=redis_server) as fleet:
        with deadline(200):
            async with client(fleet.front) as session:

                async def same() -> Any:
                    return await session.call_tool("frugal__search", {"query": "proxy"})

                first = [await served_by(fleet, same) for _ in range(5)]
                refused: dict[str, str] = {}
                for _ in range(30):  # the sixth and later, until each replica has answered one
                    replica, result = await served_by(fleet, same)
                    refused.setdefault(replica, text(result))
                    if len(refused) == 3:
                        break
    assert [result.is_error for _, result in first] == [False] * 5, [text(result) for _, result in first]
    assert len({replica for replica, _ in first}) > 1  # the five were spread
    assert len(refused) == 3, refused
    for why in refused.values():
        assert "loop guard: this exact frugal__search call has been made" in why, why
    assert apis.requests["wikipedia"] == 1  # the four others were the shared cache's


async def test_kill_9_of_a_replica_holding_a_paid_call_does_not_let_the_cap_drift(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    config = paid_config(tmp_path, apis, path="held")
    with running_fleet(tmp_path, config, "--stateless", redis=redis_server) as fleet:
        victim = fleet.replicas[0]
        failures: list[BaseException] = []
        with deadline(240):

            async def held() -> None:
                try:
                    async with client(victim.url) as session:
                        await session.call_tool("frugal__search", {"query": "hold proxy"})
                except Exception as exc:  # its replica dies under it
                    failures.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(held)
                await anyio.to_thread.run_sync(apis.holding.wait, 60)  # reserved, in flight
                await anyio.to_thread.run_sync(fleet.kill, victim)
            results = await searches(fleet.front, 30)
            before_restart = apis.requests["held"]
            again = start_replica(fleet.config, fleet.home, victim.id, "--stateless")
            try:
                async with client(again.url) as session:
                    restarted = await session.call_tool("frugal__search", {"query": "frugal"})
            finally:
                again.proxy.stop()
    assert failures  # the victim's call never answered
    served = before_restart
    assert served * PRICE <= CAP + PRICE, served
    assert spend(redis_server) == served * PRICE  # the dead replica's reservation still counts
    assert sum(not result.is_error for result in results) == served - 1
    assert restarted.is_error and "budget: skipped wikipedia (it has spent $0.0090" in text(restarted)
    assert before_restart == served  # the restarted replica did not ask it either


async def test_20_concurrent_calls_over_three_replicas_bill_a_free_quota_of_5_exactly(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    config = tmp_path / "frugal.toml"
    config.write_text(
        f'[search_providers.wikipedia]\nbase_url = "{apis.base}/wikipedia"\n'
        f'cost_per_call = "0.003"\nfree_quota_monthly = 5\n{OFF}[routing]\nloop_window = "10m"\n'
    )
    with running_fleet(tmp_path, config, "--stateless", redis=redis_server) as fleet:
        with deadline(200):
            results = await searches(fleet.front, 20)
            counts = await anyio.to_thread.run_sync(fleet.wait_lines, 20)
        ledgers = [line for replica in fleet.replicas for line in fleet.lines(replica)]
    assert [text(result) for result in results if result.is_error] == []
    assert apis.requests["wikipedia"] == 20 and all(counts.values()), counts
    receipts = [receipt_micros(result) for result in results]
    assert sorted(receipts) == [0] * 5 + [PRICE] * 15  # exactly the quota at $0, fleet-wide
    assert sum(bool(line.get("free_quota")) for line in ledgers) == 5
    assert sum(micros(line["cost_usd"]) for line in ledgers) == sum(receipts) == 15 * PRICE
    [month] = redis_server.command("KEYS", "frugal:usage:*").split()
    assert redis_server.command("HGET", month, "wikipedia") == "5"


def capped_with_a_plain_tool(tmp_path: Path, apis: FakeApis) -> Path:
    """paid_config's capped wikipedia beside the notes server's plain tools (free)."""
    config = paid_config(tmp_path, apis)
    config.write_text(f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n" + config.read_text())
    return config


async def healthz_states(fleet: Fleet, wanted: str) -> None:
    """Until every replica's /healthz says `state: wanted` (each asked again until it does: a
    state change in another process, seen over HTTP, under the test's deadline)."""
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        for replica in fleet.replicas:
            while (await http.get(f"{replica.proxy.base}/healthz")).json().get("state") != wanted:  # noqa: ASYNC110
                await anyio.sleep(0.05)


async def outage_calls(url: str) -> list[tuple[Any, Any]]:
    """Six paid searches and six plain calls at once through the front: (paid, plain) pairs."""
    pairs: list[tuple[Any, Any]] = []
    async with client(url) as session:

        async def both(n: int) -> None:
            paid = await session.call_tool("frugal__search", {"query": f"outage {n}"})
            pairs.append((paid, await session.call_tool("add", {"a": n, "b": 1})))

        async with anyio.create_task_group() as tg:
            for n in range(6):
                tg.start_soon(both, n)
    return pairs


async def ride_out(
    tmp_path: Path, apis: FakeApis, server: RedisServer, outage: Callable[[], AbstractAsyncContextManager[None]]
) -> None:
    """One paid call, then `outage` of Redis with calls through it, then the cap used up after
    it: what every outage test checks (see the module docstring)."""
    config = capped_with_a_plain_tool(tmp_path, apis)
    with running_fleet(tmp_path, config, "--stateless", "--log-level", "info", redis=server) as fleet:
        with deadline(280):  # never a hang: every call below answers inside it
            async with client(fleet.front) as session:
                before = await session.call_tool("frugal__search", {"query": "before"})
            await anyio.to_thread.run_sync(fleet.wait_lines, 1)  # in the ledger, for a rebuild
            async with outage():
                await healthz_states(fleet, "degraded")
                during = await outage_calls(fleet.front)
            await healthz_states(fleet, "ok")
            after = [await search_one(fleet.front, f"after {n}") for n in range(5)]
            await anyio.to_thread.run_sync(fleet.wait_lines, 1 + 12 + 5)
        ledgers = [line for replica in fleet.replicas for line in fleet.lines(replica)]
        alive = [replica.proxy.process.poll() is None for replica in fleet.replicas]
        logs = {replica.id: replica.proxy.lines for replica in fleet.replicas}
    assert alive == [True] * 3  # never a crash
    assert not before.is_error
    for paid, plain in during:
        assert paid.is_error and "budget: skipped wikipedia (state: redis unreachable)" in text(paid), text(paid)
        assert not plain.is_error, text(plain)  # a plain tool needs no shared state
    served = [result for result in after if not result.is_error]
    assert len(served) == 2, [text(result) for result in after]  # $0.0030 before, two more fit $0.0100
    for result in after[2:]:
        assert "budget: skipped wikipedia (" in text(result) and "daily budget" in text(result), text(result)
    assert apis.requests["wikipedia"] == 3
    receipts = sum(receipt_micros(result) for result in [before, *after])
    assert receipts == spend(server) == sum(micros(line["cost_usd"]) for line in ledgers) == 3 * PRICE
    for replica, lines in logs.items():  # one line per change, each way
        assert sum("state: redis unreachable, going degraded" in line for line in lines) == 1, (replica, lines)
        assert sum("shared state recovered" in line for line in lines) == 1, (replica, lines)


async def search_one(url: str, query: str) -> Any:
    async with client(url) as session:
        return await session.call_tool("frugal__search", {"query": query})


async def test_redis_stopped_and_started_again_mid_run(
    tmp_path: Path, apis: FakeApis, redis_server: RedisServer
) -> None:
    """Started again empty (no persistence): the day's spend is rebuilt from the ledgers."""

    @contextlib.asynccontextmanager
    async def restarted() -> AsyncIterator[None]:
        redis_server.stop()
        try:
            yield
        finally:
            redis_server.start()

    await ride_out(tmp_path, apis, redis_server, restarted)


async def test_redis_sigstopped_for_10_s_mid_run(tmp_path: Path, apis: FakeApis, redis_server: RedisServer) -> None:
    """Connections stay open and nothing answers: each replica finds out by a timeout."""

    @contextlib.asynccontextmanager
    async def paused() -> AsyncIterator[None]:
        began = time.monotonic()
        with redis_server.stopped():
            yield
            # The outage lasts 10 s at least, however soon the replicas noticed it (a length of
            # the outage, not a wait for something to happen).
            await anyio.sleep(max(0.0, 10.0 - (time.monotonic() - began)))

    await ride_out(tmp_path, apis, redis_server, paused)
