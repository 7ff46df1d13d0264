"""The spill store contract against the memory store and the Redis one: operator scoping, quota
with LRU eviction, TTL, remembered expiry, and the call memory behind repeat denials."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from frugal_proxy.state.redis_spill import RedisSpillStore
from frugal_proxy.state.spill import (
    DEFAULT_QUOTA_BYTES,
    Artifact,
    ArtifactExpired,
    MemorySpillStore,
    SpillStore,
    UnknownArtifact,
)
from tests.fake_clock import Clock
from tests.pace import deadline
from tests.redis_server import RedisServer, backend, redis_server, replica, server

__all__ = ["backend", "redis_server", "server"]
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@asynccontextmanager
async def spill_store(
    server: RedisServer | None, quota_bytes: int = DEFAULT_QUOTA_BYTES, clock: Clock | None = None
) -> AsyncIterator[SpillStore]:
    """The store under test: in memory, or on the test's redis-server as one replica holds it."""
    clock = clock or Clock()
    if server is None:
        yield MemorySpillStore(quota_bytes, clock=clock)
        return
    async with replica(server.url) as link:
        yield RedisSpillStore(link, "replica-1", quota_bytes, clock=clock)


def ids(artifacts: list[Artifact]) -> list[str]:
    return [artifact.artifact_id for artifact in artifacts]


async def test_another_operators_id_is_unknown(server: RedisServer | None) -> None:
    with deadline(20):
        async with spill_store(server) as store:
            artifact = await store.put("alice", b"payload", "sha", 60)
            assert artifact is not None and artifact.held_by is None
            found = await store.get("alice", artifact.artifact_id)
            assert (found.payload, found.sha256, found.size) == (b"payload", "sha", 7)
            with pytest.raises(UnknownArtifact):
                await store.get("bob", artifact.artifact_id)
            with pytest.raises(UnknownArtifact):
                await store.get("alice", "art_made_up")


async def test_ids_are_unguessable(server: RedisServer | None) -> None:
    async with spill_store(server) as store:
        made = set()
        for _ in range(50):
            artifact = await store.put("local", b"x", "sha", 60)
            assert artifact is not None
            made.add(artifact.artifact_id)
    assert len(made) == 50 and all(len(i) >= 30 and "." not in i for i in made)


async def test_quota_evicts_the_least_recently_used(server: RedisServer | None) -> None:
    clock = Clock()
    async with spill_store(server, quota_bytes=100, clock=clock) as store:
        first = await store.put("local", b"a" * 40, "sha", 60)
        clock.now += 1
        second = await store.put("local", b"b" * 40, "sha", 60)
        assert first is not None and second is not None
        clock.now += 1
        await store.get("local", first.artifact_id)  # first is now the most recently used
        clock.now += 1
        third = await store.put("local", b"c" * 40, "sha", 60)
        assert third is not None
        with pytest.raises(UnknownArtifact):
            await store.get("local", second.artifact_id)
        await store.get("local", first.artifact_id)
        assert await store.put("local", b"d" * 101, "sha", 60) is None
        # Another operator's quota is its own.
        assert await store.put("other", b"e" * 100, "sha", 60) is not None
        await store.get("local", third.artifact_id)


async def test_expiry_is_reported_then_forgotten_after_as_long_again(server: RedisServer | None) -> None:
    clock = Clock()
    async with spill_store(server, clock=clock) as store:
        artifact = await store.put("local", b"payload", "sha", 60)
        assert artifact is not None and artifact.expires_at == clock.now + 60
        clock.now += 61
        with pytest.raises(ArtifactExpired):
            await store.get("local", artifact.artifact_id)
        clock.now += 58
        with pytest.raises(ArtifactExpired):
            await store.get("local", artifact.artifact_id)
        clock.now += 2
        with pytest.raises(UnknownArtifact):
            await store.get("local", artifact.artifact_id)


async def test_an_expired_artifact_gives_its_bytes_back_to_the_quota(server: RedisServer | None) -> None:
    clock = Clock()
    async with spill_store(server, quota_bytes=100, clock=clock) as store:
        early = await store.put("local", b"a" * 60, "sha", 30)
        kept = await store.put("local", b"b" * 30, "sha", 300)
        assert early is not None and kept is not None
        clock.now += 31
        assert await store.put("local", b"c" * 70, "sha", 300) is not None  # fits once early is gone
        assert (await store.get("local", kept.artifact_id)).payload == b"b" * 30  # not evicted


async def test_ttl_is_capped_at_an_hour(server: RedisServer | None) -> None:
    clock = Clock()
    async with spill_store(server, clock=clock) as store:
        artifact = await store.put("local", b"x", "sha", 7200)
    assert artifact is not None and artifact.expires_at == clock.now + 3600


async def test_a_remembered_call_lives_exactly_as_long_as_its_artifacts(server: RedisServer | None) -> None:
    clock = Clock()
    async with spill_store(server, quota_bytes=100, clock=clock) as store:
        assert not store.may_recall("read")
        artifact = await store.put("local", b"x" * 60, "sha", 60)
        assert artifact is not None
        await store.remember("local", "read", "call", [artifact.artifact_id])
        assert store.may_recall("read") and not store.may_recall("write")
        recalled = await store.recall("local", "call")
        assert ids(recalled) == [artifact.artifact_id] and recalled[0].size == 60
        assert await store.recall("other", "call") == []
        clock.now += 1
        await store.put("local", b"y" * 60, "sha", 60)  # evicts the first
        assert await store.recall("local", "call") == []
        again = await store.put("local", b"z" * 30, "sha", 60)
        assert again is not None
        await store.remember("local", "read", "call", [again.artifact_id])
        clock.now += 60
        assert await store.recall("local", "call") == []


async def test_artifacts_of_different_ttls_expire_each_at_its_own_time(server: RedisServer | None) -> None:
    # The memory store skips its expiry walk until the earliest due time: each artifact (and each
    # remembered expired id) must still go exactly when it is due, whatever the order of puts.
    clock = Clock()
    async with spill_store(server, clock=clock) as store:
        late = await store.put("local", b"late", "sha", 300)
        early = await store.put("local", b"early", "sha", 30)
        middle = await store.put("local", b"middle", "sha", 120)
        assert late is not None and early is not None and middle is not None
        await store.remember("local", "read", "call", [late.artifact_id, middle.artifact_id])
        clock.now += 31
        with pytest.raises(ArtifactExpired):
            await store.get("local", early.artifact_id)
        assert (await store.get("local", middle.artifact_id)).payload == b"middle"
        assert ids(await store.recall("local", "call")) == [late.artifact_id, middle.artifact_id]
        clock.now += 90  # 121 s: the middle one is due, and the early id is forgotten at 60 s
        with pytest.raises(ArtifactExpired):
            await store.get("local", middle.artifact_id)
        with pytest.raises(UnknownArtifact):
            await store.get("local", early.artifact_id)
        assert await store.recall("local", "call") == []
        assert (await store.get("local", late.artifact_id)).payload == b"late"
        clock.now += 180  # 301 s
        with pytest.raises(ArtifactExpired):
            await store.get("local", late.artifact_id)
