"""The spill store on a shared Redis, as several replicas hold it: an artifact put by one is got
byte for byte by another, with its receipt; a repeat is recalled anywhere; what cannot go to
Redis (over `spill_max_bytes`, or Redis stopped) stays on the replica that cut it, which its id
and the other replicas name; every key expires and no operator's name is stored."""

from __future__ import annotations

import hashlib
import os

import pytest

from frugal_proxy.state.redis_spill import RedisSpillStore, operator_key
from frugal_proxy.state.spill import ArtifactElsewhere, SpillUnavailable, UnknownArtifact
from tests.pace import deadline
from tests.proxy.governor.test_receipts import RECEIPT
from tests.redis_server import RedisServer, redis_server, replica, until

__all__ = ["redis_server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def sha(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


async def test_an_artifact_put_on_one_replica_is_got_byte_for_byte_and_recalled_on_another(
    redis_server: RedisServer,
) -> None:
    payload = os.urandom(3 * 1024 * 1024)  # every byte value, several MiB
    with deadline(60):
        async with replica(redis_server.url) as one, replica(redis_server.url) as two:
            cutter, other = RedisSpillStore(one, "replica-1"), RedisSpillStore(two, "replica-2")
            artifact = await cutter.put("alice", payload, sha(payload), 600)
            assert artifact is not None and artifact.held_by is None
            await cutter.attach(artifact, RECEIPT)
            await cutter.remember("alice", "read", "call", [artifact.artifact_id])
            await until(two, lambda: other.may_recall("read"))  # the route reached its mirror
            found = await other.get("alice", artifact.artifact_id)
            recalled = await other.recall("alice", "call")
            with pytest.raises(UnknownArtifact):
                await other.get("bob", artifact.artifact_id)
    assert found.payload == payload and found.sha256 == sha(payload) and found.receipt == RECEIPT
    assert [(a.artifact_id, a.size, a.receipt) for a in recalled] == [(artifact.artifact_id, len(payload), RECEIPT)]
    stored = redis_server.command("KEYS", "*").split()
    assert all("alice" not in key for key in stored)
    assert f"frugal:spill-lru:{operator_key('alice')}" in stored
    for key in stored:  # nothing grows without bound
        assert int(redis_server.command("PTTL", key)) > 0, key


async def test_an_artifact_over_the_cap_stays_on_its_replica_which_the_others_name(redis_server: RedisServer) -> None:
    with deadline(60):
        async with replica(redis_server.url) as one, replica(redis_server.url) as two:
            cutter = RedisSpillStore(one, "replica-1", max_bytes=4096)
            other = RedisSpillStore(two, "replica-2", max_bytes=4096)
            big = await cutter.put("alice", b"b" * 5000, sha(b"b" * 5000), 600)
            small = await cutter.put("alice", b"s" * 4096, sha(b"s" * 4096), 600)
            assert big is not None and small is not None
            assert big.held_by == "replica-1" and big.artifact_id.endswith(".replica-1")
            assert small.held_by is None
            assert (await cutter.get("alice", big.artifact_id)).payload == b"b" * 5000
            with pytest.raises(ArtifactElsewhere) as elsewhere:
                await other.get("alice", big.artifact_id)
            assert (await other.get("alice", small.artifact_id)).payload == b"s" * 4096
            # a repeat is recalled where the artifact is
            await cutter.attach(big, RECEIPT)
            await cutter.remember("alice", "read", "big call", [big.artifact_id])
            assert [a.artifact_id for a in await cutter.recall("alice", "big call")] == [big.artifact_id]
    assert elsewhere.value.replica == "replica-1" and "replica-1" in str(elsewhere.value)
    assert redis_server.command("EXISTS", f"frugal:spill:{big.artifact_id}") == "0"


async def test_while_redis_is_stopped_a_new_artifact_stays_local_and_a_shared_one_is_unavailable(
    redis_server: RedisServer,
) -> None:
    async with replica(redis_server.url) as link:
        store = RedisSpillStore(link, "replica-1")
        shared = await store.put("alice", b"shared", sha(b"shared"), 600)
        assert shared is not None and shared.held_by is None
        with redis_server.stopped(), deadline(30):  # one command timeout each, at most
            kept = await store.put("alice", b"cut while down", sha(b"cut while down"), 600)
            assert kept is not None and kept.held_by == "replica-1"
            assert (await store.get("alice", kept.artifact_id)).payload == b"cut while down"
            with pytest.raises(SpillUnavailable):
                await store.get("alice", shared.artifact_id)
            assert link.state == "degraded"
        await until(link, lambda: link.state == "ok", within=30)  # the watcher recovers by itself
        with deadline(30):
            assert (await store.get("alice", shared.artifact_id)).payload == b"shared"
            after = await store.put("alice", b"after", sha(b"after"), 600)
    assert after is not None and after.held_by is None


async def test_a_put_after_redis_lost_its_scripts_still_reaches_it(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as one, replica(redis_server.url) as two:
        with deadline(30):
            first = await RedisSpillStore(one, "replica-1").put("alice", b"one", sha(b"one"), 600)
            redis_server.command("SCRIPT", "FLUSH")
            second = await RedisSpillStore(one, "replica-1").put("alice", b"two", sha(b"two"), 600)
            assert first is not None and second is not None and second.held_by is None
            found = await RedisSpillStore(two, "replica-2").get("alice", second.artifact_id)
    assert found.payload == b"two"
