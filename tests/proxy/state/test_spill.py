"""The in-memory spill store: operator scoping, quota with LRU eviction, TTL, remembered expiry,
and the call memory behind repeat denials."""

from __future__ import annotations

import anyio
import pytest

from frugal_proxy.state.spill import ArtifactExpired, MemorySpillStore, UnknownArtifact
from tests.fake_clock import Clock

pytestmark = pytest.mark.anyio


async def test_another_operators_id_is_unknown() -> None:
    with anyio.fail_after(5):
        store = MemorySpillStore()
        artifact = await store.put("alice", b"payload", "sha", 60)
        assert artifact is not None
        assert (await store.get("alice", artifact.artifact_id)).payload == b"payload"
        with pytest.raises(UnknownArtifact):
            await store.get("bob", artifact.artifact_id)
        with pytest.raises(UnknownArtifact):
            await store.get("alice", "art_made_up")


async def test_ids_are_unguessable() -> None:
    store = MemorySpillStore()
    ids = set()
    for _ in range(50):
        artifact = await store.put("local", b"x", "sha", 60)
        assert artifact is not None
        ids.add(artifact.artifact_id)
    assert len(ids) == 50 and all(len(i) >= 30 for i in ids)


async def test_quota_evicts_the_least_recently_used() -> None:
    store = MemorySpillStore(quota_bytes=100)
    first = await store.put("local", b"a" * 40, "sha", 60)
    second = await store.put("local", b"b" * 40, "sha", 60)
    assert first is not None and second is not None
    await store.get("local", first.artifact_id)  # first is now the most recently used
    third = await store.put("local", b"c" * 40, "sha", 60)
    assert third is not None
    with pytest.raises(UnknownArtifact):
        await store.get("local", second.artifact_id)
    await store.get("local", first.artifact_id)
    assert await store.put("local", b"d" * 101, "sha", 60) is None
    # Another operator's quota is its own.
    assert await store.put("other", b"e" * 100, "sha", 60) is not None
    await store.get("local", third.artifact_id)


async def test_expiry_is_reported_then_forgotten_after_as_long_again() -> None:
    clock = Clock()
    store = MemorySpillStore(clock=clock)
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


async def test_ttl_is_capped_at_an_hour() -> None:
    clock = Clock()
    store = MemorySpillStore(clock=clock)
    artifact = await store.put("local", b"x", "sha", 7200)
    assert artifact is not None and artifact.expires_at == clock.now + 3600


async def test_a_remembered_call_lives_exactly_as_long_as_its_artifacts() -> None:
    clock = Clock()
    store = MemorySpillStore(quota_bytes=100, clock=clock)
    artifact = await store.put("local", b"x" * 60, "sha", 60)
    assert artifact is not None
    await store.remember("local", "call", [artifact.artifact_id])
    assert await store.recall("local", "call") == [artifact]
    assert await store.recall("other", "call") == []
    await store.put("local", b"y" * 60, "sha", 60)  # evicts the first
    assert await store.recall("local", "call") == []
    again = await store.put("local", b"z" * 30, "sha", 60)
    assert again is not None
    await store.remember("local", "call", [again.artifact_id])
    clock.now += 60
    assert await store.recall("local", "call") == []


async def test_artifacts_of_different_ttls_expire_each_at_its_own_time() -> None:
    # The store skips its expiry walk until the earliest due time: each artifact (and each
    # remembered expired id) must still go exactly when it is due, whatever the order of puts.
    clock = Clock()
    store = MemorySpillStore(clock=clock)
    late = await store.put("local", b"late", "sha", 300)
    early = await store.put("local", b"early", "sha", 30)
    middle = await store.put("local", b"middle", "sha", 120)
    assert late is not None and early is not None and middle is not None
    await store.remember("local", "call", [late.artifact_id, middle.artifact_id])
    clock.now += 31
    with pytest.raises(ArtifactExpired):
        await store.get("local", early.artifact_id)
    assert await store.get("local", middle.artifact_id) is middle
    assert await store.recall("local", "call") == [late, middle]
    clock.now += 90  # 121 s: the middle one is due, and the early id is forgotten at 60 s
    with pytest.raises(ArtifactExpired):
        await store.get("local", middle.artifact_id)
    with pytest.raises(UnknownArtifact):
        await store.get("local", early.artifact_id)
    assert await store.recall("local", "call") == []
    assert await store.get("local", late.artifact_id) is late
    clock.now += 180  # 301 s
    with pytest.raises(ArtifactExpired):
        await store.get("local", late.artifact_id)
