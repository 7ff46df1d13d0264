"""The budgets operators set for themselves, shared on Redis: set through one replica, they hold
on the others (by pub/sub) and on a replica that starts later (by the reload); while Redis is
stopped a change is refused whole; the hash expires."""

from __future__ import annotations

import logging

import anyio
import pytest

from frugal_proxy.config import GovernorSettings, RouteBudget
from frugal_proxy.governor.operator_budgets import BudgetError, OperatorBudgets
from frugal_proxy.state.redis_budgets import RedisBudgets
from frugal_proxy.state.redis_link import RedisLink
from tests.pace import deadline
from tests.redis_server import RedisServer, redis_server, replica, until

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

SETTINGS = GovernorSettings(routes={"files__read": RouteBudget(max_bytes=4096)})


async def test_budgets_set_through_one_replica_hold_on_every_replica(redis_server: RedisServer) -> None:
    with deadline(60):
        async with replica(redis_server.url) as one, replica(redis_server.url) as two:
            first, second = OperatorBudgets(SETTINGS, RedisBudgets(one)), OperatorBudgets(SETTINGS, RedisBudgets(two))
            await first.change(
                "alice", {"default": {"max_records": 10}, "routes": {"files__read": {"max_bytes": 2048}}}
            )
            assert first.budget("alice", "files__read").max_bytes == 2048  # at once where it was set
            assert 0 < int(redis_server.command("TTL", "frugal:budgets")) <= 30 * 24 * 3600
            await until(two, lambda: second.budget("alice", "files__read").max_bytes == 2048)
            assert second.budget("alice", "other").max_records == 10 and second.budget("bob", "other").max_records == 50
            # A replica started later reads them when its watcher has connected, before it serves.
            three = RedisLink(redis_server.url, timeout=2.0, connect_timeout=2.0)
            later = OperatorBudgets(SETTINGS, RedisBudgets(three))
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(three.watch)
                    assert later.budget("alice", "other").max_records == 10
                    tg.cancel_scope.cancel()
            finally:
                await three.aclose()
            await first.change("alice", {"default": None, "routes": {"files__read": None}})
            await until(two, lambda: second.budget("alice", "other").max_records == 50)
            assert second.report("alice")["overrides"] == {"default": {}, "routes": {}}
    assert redis_server.command("EXISTS", "frugal:budgets") == "0"  # the last one removed: no key left


async def test_while_redis_is_stopped_a_change_is_refused_and_nothing_changes(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as link:
        budgets = OperatorBudgets(SETTINGS, RedisBudgets(link))
        await budgets.change("alice", {"default": {"max_records": 5}})
        with redis_server.stopped(), deadline(30):
            with pytest.raises(BudgetError) as refused:
                await budgets.change("alice", {"default": {"max_records": 7}})
        assert refused.value.code == "state_unavailable" and "not changed on any replica" in str(refused.value)
        assert budgets.budget("alice", "other").max_records == 5  # the last value seen keeps serving
        await until(link, lambda: link.state == "ok", within=30)
        with deadline(30):
            await budgets.change("alice", {"default": {"max_records": 7}})
    assert budgets.budget("alice", "other").max_records == 7


async def test_a_value_another_version_wrote_is_a_warning_and_the_configured_budgets_apply(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    redis_server.command("HSET", "frugal:budgets", "alice", '{"default": "many"}')
    caplog.set_level(logging.WARNING, "frugal_proxy.governor")
    async with replica(redis_server.url) as link:
        budgets = OperatorBudgets(SETTINGS, RedisBudgets(link))
        await link.mirrors[-1].reload()
        assert budgets.budget("alice", "files__read").max_bytes == 4096
        await budgets.change("bob", {"default": {"max_records": 3}})  # every other operator is served
        assert budgets.budget("bob", "other").max_records == 3
    assert any("shared budgets cannot be read" in record.getMessage() for record in caplog.records)
