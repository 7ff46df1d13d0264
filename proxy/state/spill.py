"""Where the full payloads of shaped results wait to be fetched in slices.

Artifacts belong to an operator (the local user on stdio; over HTTP, the identity behind the
bearer token): an id is looked up only among its operator's artifacts, so another operator's id
is as unknown as a made-up one. Each operator has a byte quota, kept by evicting the least
recently used artifacts; each artifact lives at most its TTL (at most an hour). An expired id is
remembered for as long again as its TTL, so a late fetch hears "expired" and not "unknown".

The store also remembers which call produced which spill, for the governor's repeat denial: a
denial lives exactly as long as the artifacts it points at.

    SpillStore          the interface (async, so a shared store can stand behind it: state.redis_spill)
    MemorySpillStore    the embedded default; with `replica`, the artifacts one replica of a fleet
                        keeps for itself (ids `art_<token>.<replica>`)
    held_by             the replica an artifact id says holds it (None: the shared store's, or
                        this process's own)
    SpillError          UnknownArtifact | ArtifactExpired | ArtifactElsewhere | SpillUnavailable
"""

from __future__ import annotations

import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from frugal_proxy.config import SPILL_DEFAULT_QUOTA_BYTES, SPILL_MAX_TTL
from frugal_proxy.records import OmissionReceipt

MAX_TTL = SPILL_MAX_TTL
DEFAULT_QUOTA_BYTES = SPILL_DEFAULT_QUOTA_BYTES


class SpillError(LookupError):
    """An artifact id that cannot be served; `code` is what the tools report."""

    code = "spill_error"


class UnknownArtifact(SpillError):
    code = "unknown_artifact"


class ArtifactExpired(SpillError):
    code = "artifact_expired"


class ArtifactElsewhere(SpillError):
    """The artifact is kept by another replica of the fleet alone; `replica` names it."""

    code = "artifact_elsewhere"

    def __init__(self, artifact_id: str, replica: str) -> None:
        super().__init__(
            f"artifact {artifact_id} is kept on replica {replica} only (it was larger than the shared "
            f"spill store takes, or the store was unreachable when it was cut): fetch it through {replica}"
        )
        self.replica = replica


class SpillUnavailable(SpillError):
    """The shared store that holds the artifact does not answer (for now)."""

    code = "spill_unavailable"


def held_by(artifact_id: str) -> str | None:
    """The replica an artifact id names as its only holder, or None (ids without a replica)."""
    _, dot, replica = artifact_id.partition(".")
    return replica if dot and replica else None


def new_id(replica: str | None = None) -> str:
    """A fresh artifact id: 192 random bits, and the replica that alone holds it, if one does."""
    token = "art_" + secrets.token_urlsafe(24)
    return f"{token}.{replica}" if replica else token


@dataclass
class Artifact:
    artifact_id: str
    operator: str
    payload: bytes
    sha256: str
    expires_at: float
    ttl: float
    receipt: OmissionReceipt | None = None
    # The replica that alone holds it (a fleet's artifact that could not be shared), else None.
    held_by: str | None = None
    # len(payload); given where the payload is left out (a shared store's `recall`).
    size: int = -1

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = len(self.payload)


class SpillStore(Protocol):
    async def put(self, operator: str, payload: bytes, sha256: str, ttl: float) -> Artifact | None:
        """Keep a payload; None when it is larger than the operator's whole quota."""

    async def attach(self, artifact: Artifact, receipt: OmissionReceipt) -> None:
        """Keep the receipt issued for an artifact beside it (for denials)."""

    async def get(self, operator: str, artifact_id: str) -> Artifact:
        """The operator's artifact; raises UnknownArtifact or ArtifactExpired."""

    async def remember(self, operator: str, route: str, call_key: str, artifact_ids: Sequence[str]) -> None:
        """Note that a call of `route` had its result spilled into these artifacts."""

    async def recall(self, operator: str, call_key: str) -> list[Artifact]:
        """The live artifacts of an earlier identical call; [] (and forgotten) once any is gone.
        A shared store may leave their payloads out (b""; `size` says how large they are)."""

    def may_recall(self, route: str) -> bool:
        """Whether a call of `route` was ever remembered (so a call of any other route needs no
        fingerprint); a shared store answers from a local mirror, stale by a pub/sub delivery."""


@dataclass
class _Operator:
    artifacts: OrderedDict[str, Artifact] = field(default_factory=OrderedDict)
    used: int = 0
    expired: dict[str, float] = field(default_factory=dict)
    calls: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # No artifact expires and no expired id is forgotten before this: until then a look-up
    # walks nothing (the artifacts are kept in use order, not expiry order).
    next_due: float = math.inf


class MemorySpillStore:
    """The embedded default: artifacts in this process's memory, per-operator LRU under a quota."""

    def __init__(
        self,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        clock: Callable[[], float] = time.time,
        replica: str | None = None,
    ) -> None:
        self.quota_bytes = quota_bytes
        self.clock = clock
        self.replica = replica  # set: the ids say this replica alone holds them
        self._operators: dict[str, _Operator] = {}
        self._routes: set[str] = set()

    def _operator(self, operator: str) -> _Operator:
        state = self._operators.get(operator)
        if state is None:  # not setdefault: that would build a throw-away _Operator on every call
            state = self._operators[operator] = _Operator()
        self._expire(state)
        return state

    def _expire(self, state: _Operator) -> None:
        now = self.clock()
        if now < state.next_due:
            return
        due = [artifact for artifact in state.artifacts.values() if artifact.expires_at <= now]
        for artifact in due:
            self._drop(state, artifact.artifact_id)
            state.expired[artifact.artifact_id] = artifact.expires_at + artifact.ttl
        if due:
            self._forget_calls(state)
        for artifact_id, forget_at in list(state.expired.items()):
            if forget_at <= now:
                del state.expired[artifact_id]
        state.next_due = min(
            min((artifact.expires_at for artifact in state.artifacts.values()), default=math.inf),
            min(state.expired.values(), default=math.inf),
        )

    def _forget_calls(self, state: _Operator) -> None:
        """Forget the calls whose spill is no longer whole (some artifact expired or evicted)."""
        for call_key, ids in list(state.calls.items()):
            if any(i not in state.artifacts for i in ids):
                del state.calls[call_key]

    def _drop(self, state: _Operator, artifact_id: str) -> None:
        artifact = state.artifacts.pop(artifact_id)
        state.used -= artifact.size

    async def put(self, operator: str, payload: bytes, sha256: str, ttl: float) -> Artifact | None:
        if len(payload) > self.quota_bytes:
            return None
        state = self._operator(operator)
        evicted = False
        while state.artifacts and state.used + len(payload) > self.quota_bytes:
            self._drop(state, next(iter(state.artifacts)))
            evicted = True
        if evicted:
            self._forget_calls(state)
        artifact = Artifact(
            artifact_id=new_id(self.replica),
            operator=operator,
            payload=payload,
            sha256=sha256,
            expires_at=self.clock() + min(ttl, MAX_TTL),
            ttl=min(ttl, MAX_TTL),
            held_by=self.replica,
        )
        state.artifacts[artifact.artifact_id] = artifact
        state.used += artifact.size
        state.next_due = min(state.next_due, artifact.expires_at)
        return artifact

    async def attach(self, artifact: Artifact, receipt: OmissionReceipt) -> None:
        artifact.receipt = receipt

    async def get(self, operator: str, artifact_id: str) -> Artifact:
        state = self._operator(operator)
        artifact = state.artifacts.get(artifact_id)
        if artifact is not None:
            state.artifacts.move_to_end(artifact_id)
            return artifact
        if artifact_id in state.expired:
            raise ArtifactExpired(f"artifact {artifact_id} has expired; call the tool again for a new one")
        raise UnknownArtifact(f"no artifact {artifact_id} is kept for you (never made, or evicted)")

    async def remember(self, operator: str, route: str, call_key: str, artifact_ids: Sequence[str]) -> None:
        self._routes.add(route)
        self._operator(operator).calls[call_key] = tuple(artifact_ids)

    def may_recall(self, route: str) -> bool:
        return route in self._routes

    async def recall(self, operator: str, call_key: str) -> list[Artifact]:
        state = self._operator(operator)
        ids = state.calls.get(call_key, ())
        found = [state.artifacts[i] for i in ids if i in state.artifacts]
        if len(found) != len(ids) or not ids:
            state.calls.pop(call_key, None)
            return []
        return found
