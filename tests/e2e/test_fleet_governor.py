"""The size governor over a fleet: three `serve --http --stateless` replicas behind
HAProxy on one redis-server (tests/e2e/fleet.py), the SDK client in front, the notes server's
`blob` as the large result, signing with one key from the environment (FRUGAL_RECEIPT_KEY):

- a result cut on one replica is fetched slice by slice from each of the others and through
  HAProxy (whose round-robin spreads the slices over all three), byte-exact against the
  payload's sha256, over MCP and over `/fetch-slice`; its receipt verifies on every replica; a
  repeat of the call is denied on every replica; after kill -9 of the replica that cut it, the
  others still serve it;
- an artifact over `[state] spill_max_bytes` stays on the replica that cut it, its receipt says
  so (`held_by`), and another replica asked for it answers `artifact_elsewhere` naming it;
- with Redis SIGSTOPped, a new artifact is kept by its replica (its receipt says which), a
  shared one answers `spill_unavailable` instead of hanging; once Redis answers again, both
  are served as before;
- the budgets an operator lowers through one replica (`POST /budgets`) shape its calls on the
  others.

Each fails on the memory backend (another replica answers `unknown_artifact`, or keeps the
configured budgets)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from frugal_proxy.governor import keys
from tests.conftest import notes_command
from tests.e2e.fleet import Fleet, Replica, on_redis, running_fleet, until
from tests.e2e.test_governor import dump, fetch_all, governor_meta
from tests.pace import deadline, paced
from tests.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

MAX_BYTES = 8192  # the governor's budget: a slice is at most a fifth of it
SHARED_MAX = 40_000  # [state] spill_max_bytes


def blob(size: int) -> bytes:
    """What the notes server's `blob` tool answers (examples/servers/notes_server.py)."""
    line = "frugal-proxy moves bytes without copying them twice. "
    return (line * (size // len(line) + 1))[:size].encode()


def config(tmp_path: Path) -> Path:
    path = tmp_path / "frugal.toml"
    path.write_text(
        f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n[governor]\nmax_bytes = {MAX_BYTES}\n"
    )
    return path


@pytest.fixture
def signing_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """One key for the whole fleet, from the environment the replicas inherit: its key id."""
    key_id, private, _ = keys.new_pair()
    monkeypatch.setenv(keys.KEY_ENV, private)
    return key_id


@contextmanager
def fleet_on_redis(tmp_path: Path, server: RedisServer) -> Iterator[Fleet]:
    """The fleet on `server`, its [state] table (the copy's last) with spill_max_bytes added."""
    path = on_redis(config(tmp_path), server)
    path.write_text(path.read_text() + f"spill_max_bytes = {SHARED_MAX}\n")
    with running_fleet(tmp_path, path, "--stateless") as fleet:
        yield fleet


def client(url: str) -> Client:
    return Client(url, mode="auto", cache=None)


async def cut(url: str, size: int) -> dict[str, Any]:
    """Call `blob` on one replica; its result's first receipt."""
    async with client(url) as session:
        result = dump(await session.call_tool("blob", {"size": size}))
    receipt: dict[str, Any] = governor_meta(result)["receipts"][0]
    return receipt


async def tool(url: str, name: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    async with client(url) as session:
        result = await session.call_tool(name, arguments)
    return result.is_error, (result.content[0].text if result.is_error else result.structured_content)


async def slices_over_http(replica: Replica, artifact_id: str) -> bytes:
    data, offset = b"", 0
    async with httpx2.AsyncClient(timeout=paced(30)) as http:
        while offset is not None:
            answer = await http.post(
                f"{replica.proxy.base}/fetch-slice", json={"artifact_id": artifact_id, "offset": offset}
            )
            assert answer.status_code == 200, answer.text
            report = answer.json()
            data += base64.b64decode(report["data_base64"])
            offset = report["next_offset"]
    return data


def state(replica: Replica) -> str:
    """What the replica's /healthz says of its shared state (blocking: run it in a thread)."""
    return str(httpx2.get(f"{replica.proxy.base}/healthz", timeout=paced(30)).json()["state"])


async def test_a_result_cut_on_one_replica_is_fetched_slice_by_slice_from_each_other_one(
    tmp_path: Path, redis_server: RedisServer, signing_key: str
) -> None:
    payload = blob(20_000)  # under the shared cap: in Redis
    with fleet_on_redis(tmp_path, redis_server) as fleet, deadline(240):
        cutter, *others = fleet.replicas
        receipt = await cut(cutter.url, len(payload))
        artifact_id = receipt["artifact_id"]
        fetched: dict[str, bytes] = {}
        for replica in others:
            async with client(replica.url) as session:
                fetched[f"{replica.id} over MCP"] = await fetch_all(session, artifact_id)
            fetched[f"{replica.id} over HTTP"] = await slices_over_http(replica, artifact_id)
        async with client(fleet.front) as session:  # round-robin: the slices land on all three
            fetched["through HAProxy"] = await fetch_all(session, artifact_id)
        verified = [
            await tool(replica.url, "frugal__verify_receipt", {"receipt": receipt}) for replica in fleet.replicas
        ]
        repeats = [await tool(replica.url, "blob", {"size": len(payload)}) for replica in others]
        await anyio.to_thread.run_sync(fleet.kill, cutter)  # kill -9: what it cut lives on in Redis
        async with client(fleet.front) as session:
            fetched["after the cutter's kill -9"] = await fetch_all(session, artifact_id)
    assert receipt["sha256"] == hashlib.sha256(payload).hexdigest() and "held_by" not in receipt
    assert receipt["key_id"] == signing_key  # the fleet's one key, from the environment
    assert artifact_id.startswith("art_") and "." not in artifact_id
    for where, data in fetched.items():
        assert data == payload, where
    assert len(payload) // (MAX_BYTES // 5) >= 10  # slice by slice: more than ten of them each
    for failed, report in verified:
        assert not failed and report["valid"] and report["key_id"] == signing_key, report
    for failed, text in repeats:  # the repeat denial holds on every replica
        assert failed and "frugal: denied: this exact call to blob was answered a moment ago" in text, text


async def test_an_artifact_over_the_shared_cap_stays_on_its_replica_and_the_others_name_it(
    tmp_path: Path, redis_server: RedisServer, signing_key: str
) -> None:
    payload = blob(60_000)  # over spill_max_bytes: not in Redis
    with fleet_on_redis(tmp_path, redis_server) as fleet, deadline(240):
        cutter, other, _ = fleet.replicas
        receipt = await cut(cutter.url, len(payload))
        artifact_id = receipt["artifact_id"]
        async with client(cutter.url) as session:
            kept = await fetch_all(session, artifact_id)
        refused = await tool(other.url, "frugal__fetch_slice", {"artifact_id": artifact_id})
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            answer = await http.post(f"{other.proxy.base}/fetch-slice", json={"artifact_id": artifact_id})
        verified = await tool(other.url, "frugal__verify_receipt", {"receipt": receipt})
    assert receipt["held_by"] == cutter.id and artifact_id.endswith(f".{cutter.id}")
    assert kept == payload
    failed, text = refused
    assert (
        failed
        and text.startswith("frugal__fetch_slice: artifact_elsewhere:")
        and f"kept on replica {cutter.id} only" in text
    ), text
    assert answer.status_code == 421 and answer.json()["error"] == "artifact_elsewhere", answer.text
    assert cutter.id in answer.json()["message"]
    assert not verified[0] and verified[1]["valid"]  # the receipt that says so is genuine everywhere
    assert redis_server.command("EXISTS", f"frugal:spill:{artifact_id}") == "0"


async def test_while_redis_is_stopped_new_spill_stays_local_and_shared_spill_is_unavailable_then_recovers(
    tmp_path: Path, redis_server: RedisServer, signing_key: str
) -> None:
    shared_payload, local_payload = blob(20_000), blob(21_000)
    with fleet_on_redis(tmp_path, redis_server) as fleet, deadline(270):
        cutter, other, _ = fleet.replicas
        shared = (await cut(cutter.url, len(shared_payload)))["artifact_id"]
        with redis_server.stopped():
            local = await cut(cutter.url, len(local_payload))  # waits out one command timeout at most
            unavailable = await tool(other.url, "frugal__fetch_slice", {"artifact_id": shared})
            async with client(cutter.url) as session:
                kept_while_down = await fetch_all(session, local["artifact_id"])
            degraded = await anyio.to_thread.run_sync(state, other)
        # the replicas' watchers recover by themselves
        await anyio.to_thread.run_sync(until, lambda: state(other) == "ok", "the replica did not recover")
        async with client(other.url) as session:
            shared_after = await fetch_all(session, shared)
        elsewhere = await tool(other.url, "frugal__fetch_slice", {"artifact_id": local["artifact_id"]})
        verified = await tool(other.url, "frugal__verify_receipt", {"receipt": local})
    assert local["held_by"] == cutter.id and kept_while_down == local_payload
    failed, text = unavailable
    assert failed and text.startswith("frugal__fetch_slice: spill_unavailable:") and "try again" in text, text
    assert degraded == "degraded"
    assert shared_after == shared_payload
    assert (
        elsewhere[0]
        and elsewhere[1].startswith("frugal__fetch_slice: artifact_elsewhere:")
        and cutter.id in elsewhere[1]
    )
    assert not verified[0] and verified[1]["valid"]


async def test_budgets_an_operator_lowers_through_one_replica_shape_its_calls_on_the_others(
    tmp_path: Path, redis_server: RedisServer, signing_key: str
) -> None:
    with fleet_on_redis(tmp_path, redis_server) as fleet, deadline(240):
        first, *others = fleet.replicas
        async with httpx2.AsyncClient(timeout=paced(30)) as http:
            answer = await http.post(f"{first.proxy.base}/budgets", json={"routes": {"blob": {"max_bytes": 2048}}})
        assert answer.status_code == 200, answer.text
        for replica in others:  # each one's copy follows by pub/sub: one delivery behind
            await anyio.to_thread.run_sync(
                until, lambda r=replica: lowered(r) == 2048, f"{replica.id} did not get the lowered budget"
            )
        cuts = [await cut(replica.url, 5000) for replica in others]  # within the configured 8192
    for receipt in cuts:
        assert receipt["total_bytes"] == 5000 and receipt["returned_bytes"] <= 2048, receipt


def lowered(replica: Replica) -> int | None:
    """The operator's own max_bytes for `blob` on one replica (blocking: run it in a thread)."""
    report = httpx2.get(f"{replica.proxy.base}/budgets", timeout=paced(30)).json()
    value: int | None = report["overrides"]["routes"].get("blob", {}).get("max_bytes")
    return value
