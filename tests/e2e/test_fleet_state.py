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
  the cap.

Each fails with the memory backend (each replica its own books: 9 paid calls, 3 fences, two
loops of five). Which replica served a call is read from the replicas' ledger files."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from frugal_proxy.ledger.line import micros
from tests.e2e.fleet import Fleet, running_fleet, start_replica
from tests.e2e.test_redis_state import OFF
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
        with anyio.fail_after(200):
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
    with running_fleet(tmp_path, config, "--stateless", redis=redis_server) as fleet:
        with anyio.fail_after(200):
            async with client(fleet.front) as session:
                fenced_by, first = await served_by(fleet, lambda: session.call_tool("frugal__search", {"query": "a"}))
                # The fence is in Redis (and published) before that replica answered, so every
                # other replica's mirror has it before the next request reaches it.
                assert redis_server.command("HEXISTS", "frugal:cooldowns", "wikipedia") == "1"
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
        with anyio.fail_after(200):
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
        with anyio.fail_after(240):

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
