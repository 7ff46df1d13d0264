"""Replicas behind a load balancer, as docs/fleet.md runs them: three `serve --http` processes
and HAProxy with examples/fleet/haproxy.cfg (tests/e2e/fleet.py starts them), the SDK client in
front. Which replica served a call is read from the replicas' own ledger files, never from timing.

- 2026-07-28 calls spread over the replicas, and `stats` over the shared usage folder agrees;
- a session-era session stays on the replica that opened it; another replica answers its id
  with 404 (and a --stateless one serves it: it holds no sessions); under --stateless a
  session-era client is served by any replica;
- kill -9 of a replica: HAProxy takes it out, new calls succeed, its session gets 404 and the
  client starts a new one, and the ledgers still add up;
- two processes given one replica id write one file, line by line, never a torn line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from frugal_proxy.ledger import reader
from frugal_proxy.state.usage import utc_month
from tests.e2e.fleet import REPLICA_IDS, Fleet, priced_notes_config, running_fleet, start_replica
from tests.e2e.test_http_downstream import INITIALIZE, LEGACY_HEADERS
from tests.pace import deadline, paced

# Three replicas and HAProxy start in about 10 s on an idle machine; four times that on a loaded one.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


def client(url: str, mode: str = "auto") -> Client:
    return Client(url, mode=mode, cache=None)  # type: ignore[arg-type]


async def add(session: Client, n: int) -> None:
    result = await session.call_tool("add", {"a": n, "b": 1})
    assert not result.is_error, result


async def calls(session: Client, count: int, start: int = 0) -> None:
    """`count` calls at once on one client."""
    async with anyio.create_task_group() as tg:
        for n in range(start, start + count):
            tg.start_soon(add, session, n)


async def stats(fleet: Fleet) -> dict[str, Any]:
    environ = {**os.environ, "FRUGAL_HOME": str(fleet.home)}
    done = await anyio.run_process([sys.executable, "-m", "frugal_proxy", "stats", "--json"], env=environ)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


async def test_modern_calls_spread_over_the_replicas_and_stats_reads_them_all(tmp_path: Path) -> None:
    with running_fleet(tmp_path, priced_notes_config(tmp_path), "--stateless") as fleet:
        with deadline(150):
            async with client(fleet.front) as session:
                for round_ in range(3):
                    await calls(session, 10, start=10 * round_)
            counts = await anyio.to_thread.run_sync(fleet.wait_lines, 30)
            assert sum(counts.values()) == 30 and all(counts.values()), counts  # each replica served some
            figures = await stats(fleet)
    assert figures["replicas"] == list(REPLICA_IDS)
    assert (figures["calls"], figures["failed_calls"], figures["paid_usd"]) == (30, 0, 0.09)


async def test_a_session_era_client_stays_on_its_replica_for_the_whole_session(tmp_path: Path) -> None:
    with running_fleet(tmp_path, priced_notes_config(tmp_path)) as fleet:
        with deadline(150):
            async with client(fleet.front, "legacy") as session:
                for n in range(3):
                    await calls(session, 4, start=4 * n)
                await session.list_tools()
            counts = await anyio.to_thread.run_sync(fleet.wait_lines, 12)
    assert sorted(counts.values()) == [0, 0, 12], counts


async def test_a_session_era_client_is_served_by_any_replica_of_a_stateless_fleet(tmp_path: Path) -> None:
    with running_fleet(tmp_path, priced_notes_config(tmp_path), "--stateless") as fleet:
        with deadline(150):
            async with client(fleet.front, "legacy") as session:
                for n in range(4):
                    await calls(session, 6, start=6 * n)
            counts = await anyio.to_thread.run_sync(fleet.wait_lines, 24)
    assert sum(counts.values()) == 24 and len([n for n in counts.values() if n]) > 1, counts


async def test_a_replica_answers_a_session_it_does_not_hold_with_404(tmp_path: Path) -> None:
    """The spec's rule for an ended session, which is what another replica's session is here:
    404, and the client initializes again. A --stateless replica holds no sessions and serves
    the request (it ignores Mcp-Session-Id)."""
    config, home = priced_notes_config(tmp_path), tmp_path / "home"
    opened, other, stateless = (
        start_replica(config, home, "replica-1"),
        start_replica(config, home, "replica-2"),
        start_replica(config, home, "replica-3", "--stateless"),
    )
    try:
        with deadline(60):
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                started = await http.post(opened.url, json=INITIALIZE, headers=LEGACY_HEADERS)
                session_id = started.headers["mcp-session-id"]
                assert session_id.startswith("replica-1.")  # nginx routes by this prefix
                headers = {**LEGACY_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
                listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
                assert (await http.post(opened.url, json=listing, headers=headers)).status_code == 200
                elsewhere = await http.post(other.url, json=listing, headers=headers)
                assert elsewhere.status_code == 404
                assert elsewhere.json()["error"]["message"] == "unknown or ended session: initialize again"
                served = await http.post(stateless.url, json=listing, headers=headers)
                assert served.status_code == 200 and "mcp-session-id" not in served.headers
                assert any(tool["name"] == "add" for tool in served.json()["result"]["tools"])
    finally:
        for replica in (opened, other, stateless):
            replica.proxy.stop()


async def test_kill_9_of_a_replica_mid_run(tmp_path: Path) -> None:
    with running_fleet(tmp_path, priced_notes_config(tmp_path)) as fleet:
        with deadline(180):
            async with client(fleet.front, "legacy") as held, client(fleet.front) as modern:
                await add(held, 0)
                # the replica holding the session: the one that wrote its first call's line (how
                # round-robin spreads the other calls depends on HAProxy's health checks under load)
                first = await anyio.to_thread.run_sync(fleet.wait_lines, 1)
                [victim] = [replica for replica in fleet.replicas if first[replica.id] == 1]
                await calls(modern, 9, start=1)
                before = await anyio.to_thread.run_sync(fleet.wait_lines, 10)
                await anyio.to_thread.run_sync(fleet.kill, victim)  # its lines are on disk: none lost
                await calls(modern, 12, start=10)  # routed around it
                with pytest.raises(MCPError, match="unknown or ended session: initialize again"):
                    await add(held, 22)  # its replica is gone: another one answers 404
            async with client(fleet.front, "legacy") as again:  # the client starts a new session
                await add(again, 23)
            counts = await anyio.to_thread.run_sync(fleet.wait_lines, 23)
            figures = await stats(fleet)
    assert counts[victim.id] == before[victim.id] and sum(counts.values()) == 23, counts  # none after the kill
    assert figures["replicas"] == list(REPLICA_IDS)
    assert (figures["calls"], figures["failed_calls"], figures["paid_usd"]) == (23, 0, 0.069)


async def test_two_processes_with_one_replica_id_share_its_file_safely(tmp_path: Path) -> None:
    """Refused or made safe: made safe. Two `serve` processes given the same --replica-id and
    usage folder append to one file, each line whole (O_APPEND, one write per line group of at
    most PIPE_BUF), so every call is counted once and no line is torn."""
    config, home = priced_notes_config(tmp_path), tmp_path / "home"
    twins = [start_replica(config, home, "same"), start_replica(config, home, "same")]
    try:
        with deadline(180):
            async with client(twins[0].url) as first, client(twins[1].url) as second:
                async with anyio.create_task_group() as tg:
                    for n in range(3):
                        tg.start_soon(calls, first, 20, 100 * n)
                        tg.start_soon(calls, second, 20, 100 * n + 50)
    finally:
        for twin in twins:
            assert twin.proxy.stop() == 0  # SIGTERM: each writes out what it queued
    month = utc_month(time.time())
    assert [path.name for path in reader.month_files(month, home / "usage")] == [f"{month}.same.jsonl"]
    path = reader.month_path(month, home / "usage", "same")
    damage = reader.Damage(path)
    lines = list(reader.lines(path, dict, damage))
    assert damage.lines == [] and len(lines) == 120
    assert sorted(line["provider"] for line in lines) == ["notes"] * 120
