"""The size governor's spill store on a shared Redis: an artifact cut on one replica is fetched,
slice by slice, from any other, and a repeat of a shaped call is refused wherever it lands.

    RedisSpillStore   SpillStore, keys under the prefix (`<op>` is a blake3 digest of the
                      operator, never its name):
        spill:<id>            the payload, expiring with the artifact's TTL
        spill-meta:<id>       its operator, sha256, size, expiry, TTL and receipt, kept as long
                              again (a late fetch hears "expired", not "unknown")
        spill-lru:<op>        the operator's artifacts by last use, for the quota's eviction
        spill-exp:<op>        … by expiry, so that a put reclaims what has expired
        spill-size:<op>       … their sizes, and `~used`, the operator's bytes
        spill-call:<op>:<k>   the artifact ids of a shaped call (the repeat denial), expiring
                              with the first of them
        spill-routes          the routes a shaped call was remembered for (mirrored, so that a
                              call of any other route needs no fingerprint on any replica)

Memory is bounded: an artifact over `[state] spill_max_bytes` (64 MiB by default) does not go
to Redis; each operator's artifacts are held to `governor.spill_quota_bytes` fleet-wide (least
recently used out first, in the put's script); every key expires (an artifact with its TTL, at
most an hour; its metadata, the indexes and the routes within two hours).

An artifact that cannot go to Redis (over the cap, or Redis unreachable) is kept by this
replica alone, never dropped: its id ends in `.<replica id>` and its receipt's `held_by` names
the replica; another replica asked for it answers `artifact_elsewhere`, naming it. A fetch of
a shared artifact while Redis does not answer is `spill_unavailable`, after one command timeout
at most (none during the link's back-off).

Round trips: a put is one transaction (the index script and the payload's SET), the receipt
one more (it is signed once the artifact's place is known); a get one pipeline (metadata,
payload, the LRU touch); remember and recall one script each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import blake3
import msgspec

from frugal_proxy.config import SPILL_DEFAULT_SHARED_BYTES
from frugal_proxy.records import OmissionReceipt
from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink
from frugal_proxy.state.spill import (
    DEFAULT_QUOTA_BYTES,
    MAX_TTL,
    Artifact,
    ArtifactElsewhere,
    ArtifactExpired,
    MemorySpillStore,
    SpillUnavailable,
    UnknownArtifact,
    held_by,
    new_id,
)

log = logging.getLogger("frugal_proxy.state")

INDEX_TTL = int(2 * MAX_TTL) + 60  # seconds: the indexes outlive every artifact and its metadata
_FIELDS = ("op", "sha256", "size", "expires_at", "ttl", "receipt")

# KEYS: meta, lru, sizes, exp. ARGV: 1 id, 2 op, 3 sha256, 4 size, 5 expires_at, 6 ttl, 7 now,
# 8 quota, 9 meta ttl (ms), 10 payload key prefix, 11 meta key prefix, 12 index ttl (s).
# Drops the operator's expired artifacts (their metadata stays: "expired"), then evicts the least
# recently used (metadata too: "unknown") until the new one fits, then indexes it.
_INDEX = """
local now, quota, size = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[4])
local function drop(id, forget)
  local held = tonumber(redis.call('HGET', KEYS[3], id) or '0')
  redis.call('HDEL', KEYS[3], id)
  redis.call('HINCRBY', KEYS[3], '~used', -held)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('DEL', ARGV[10] .. id)
  if forget then redis.call('DEL', ARGV[11] .. id) end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[7])) do drop(id, false) end
local used = tonumber(redis.call('HGET', KEYS[3], '~used') or '0')
while used + size > quota do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #oldest == 0 then break end
  drop(oldest[1], true)
  used = tonumber(redis.call('HGET', KEYS[3], '~used') or '0')
end
redis.call('HSET', KEYS[1], 'op', ARGV[2], 'sha256', ARGV[3], 'size', ARGV[4], 'expires_at', ARGV[5], 'ttl', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[9])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
redis.call('HINCRBY', KEYS[3], '~used', size)
for i = 2, 4 do redis.call('EXPIRE', KEYS[i], ARGV[12]) end
return used + size
"""

# KEYS: meta. ARGV: the receipt. An artifact evicted meanwhile gets no receipt.
_ATTACH = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'receipt', ARGV[1]) end
return 1
"""

# KEYS: the call, the routes. ARGV: 1 op, 2 now, 3 meta prefix, 4 route, 5 channel, 6 routes
# ttl (s), 7… the ids. The call expires with the first of its artifacts; 0 when one is gone.
_REMEMBER = """
local ends = nil
for i = 7, #ARGV do
  local meta = redis.call('HMGET', ARGV[3] .. ARGV[i], 'op', 'expires_at')
  if meta[1] ~= ARGV[1] then return 0 end
  local e = tonumber(meta[2])
  if ends == nil or e < ends then ends = e end
end
if redis.call('SADD', KEYS[2], ARGV[4]) == 1 then redis.call('PUBLISH', ARGV[5], 'spill-route ' .. ARGV[4]) end
redis.call('EXPIRE', KEYS[2], ARGV[6])
local ms = math.floor((ends - tonumber(ARGV[2])) * 1000)
if ms <= 0 then return 0 end
redis.call('SET', KEYS[1], table.concat(ARGV, ' ', 7), 'PX', ms)
return 1
"""

# KEYS: the call. ARGV: 1 op, 2 now, 3 meta prefix, 4 payload prefix. Each live artifact's id
# and its metadata (sha256, size, expires_at, ttl, receipt); {} (and the call forgotten) once
# any of them is gone.
_RECALL = """
local ids = redis.call('GET', KEYS[1])
if not ids then return {} end
local found = {}
for id in string.gmatch(ids, '%S+') do
  local meta = redis.call('HMGET', ARGV[3] .. id, 'op', 'sha256', 'size', 'expires_at', 'ttl', 'receipt')
  if meta[1] ~= ARGV[1] or tonumber(meta[4]) <= tonumber(ARGV[2])
     or redis.call('EXISTS', ARGV[4] .. id) == 0 then
    redis.call('DEL', KEYS[1])
    return {}
  end
  table.insert(found, id)
  for j = 2, 6 do table.insert(found, meta[j] or '') end
end
return found
"""

_receipt = msgspec.json.Decoder(OmissionReceipt)
_encoder = msgspec.json.Encoder()


def operator_key(operator: str) -> str:
    """The operator's part of a key: a digest, so that no operator's name is stored."""
    return blake3.blake3(operator.encode()).hexdigest()[:32]


class RedisSpillStore:
    def __init__(
        self,
        link: RedisLink,
        replica: str,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        max_bytes: int = SPILL_DEFAULT_SHARED_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.link = link
        self.replica = replica
        self.quota_bytes = quota_bytes
        self.max_bytes = max_bytes
        self.clock = clock
        # What this replica keeps for itself: over the cap, or cut while Redis did not answer.
        self.local = MemorySpillStore(quota_bytes, clock, replica=replica)
        self.routes = link.key("spill-routes")
        self._routes: set[str] = set()
        self._index = link.script(_INDEX)
        self._attach = link.script(_ATTACH)
        self._remember = link.script(_REMEMBER)
        self._recall = link.script(_RECALL)
        link.mirror("spill-route", self._reload, self._apply)

    def _keys(self, operator: str, artifact_id: str) -> tuple[str, str, str, str, str]:
        """The payload, metadata, LRU, sizes and expiry keys of one artifact."""
        op = operator_key(operator)
        return (
            self.link.key("spill", artifact_id),
            self.link.key("spill-meta", artifact_id),
            self.link.key("spill-lru", op),
            self.link.key("spill-size", op),
            self.link.key("spill-exp", op),
        )

    async def put(self, operator: str, payload: bytes, sha256: str, ttl: float) -> Artifact | None:
        if len(payload) > self.quota_bytes:
            return None
        if len(payload) > self.max_bytes:
            log.info(
                "a spill artifact is over state.spill_max_bytes: kept on this replica only",
                extra={"bytes": len(payload), "limit": self.max_bytes, "replica": self.replica},
            )
            return await self.local.put(operator, payload, sha256, ttl)
        ttl = min(ttl, MAX_TTL)
        now = self.clock()
        artifact = Artifact(new_id(), operator, payload, sha256, now + ttl, ttl)
        payload_key, meta, lru, sizes, exp = self._keys(operator, artifact.artifact_id)
        args = [
            artifact.artifact_id,
            operator_key(operator),
            sha256,
            len(payload),
            repr(artifact.expires_at),
            repr(ttl),
            repr(now),
            self.quota_bytes,
            int(2 * ttl * 1000) + 1000,
            self.link.key("spill", ""),
            self.link.key("spill-meta", ""),
            INDEX_TTL,
        ]
        client, timeout = self.link.bulk(self.max_bytes)

        async def write() -> Any:
            async with client.pipeline(transaction=True) as pipe:
                pipe.execute_command("EVALSHA", self._index.sha, 4, meta, lru, sizes, exp, *args)
                pipe.set(payload_key, payload, px=max(1, int(ttl * 1000)))
                return await pipe.execute(raise_on_error=False)

        reply = await self.link.run(write, allowance=timeout)
        if reply is not UNREACHABLE and _no_script(reply[0]):
            await self.link.run(lambda: client.script_load(_INDEX))  # Redis restarted empty
            reply = await self.link.run(write, allowance=timeout)
        if reply is UNREACHABLE or any(isinstance(part, Exception) for part in reply):  # such as OOM
            log.debug("a spill artifact kept on this replica: redis did not take it", extra={"replica": self.replica})
            return await self.local.put(operator, payload, sha256, ttl)
        return artifact

    async def attach(self, artifact: Artifact, receipt: OmissionReceipt) -> None:
        artifact.receipt = receipt
        if artifact.held_by is not None:
            return
        meta = self.link.key("spill-meta", artifact.artifact_id)
        encoded = _encoder.encode(receipt)
        await self.link.run(lambda: self._attach(keys=[meta], args=[encoded]))

    async def get(self, operator: str, artifact_id: str) -> Artifact:
        holder = held_by(artifact_id)
        if holder == self.replica:
            return await self.local.get(operator, artifact_id)
        if holder is not None:
            raise ArtifactElsewhere(artifact_id, holder)
        payload_key, meta, lru, _, _ = self._keys(operator, artifact_id)
        now = self.clock()
        client, timeout = self.link.bulk(self.max_bytes)

        async def read() -> Any:
            async with client.pipeline(transaction=False) as pipe:
                pipe.hmget(meta, *_FIELDS)
                pipe.get(payload_key)
                pipe.zadd(lru, {artifact_id: now}, xx=True)
                return await pipe.execute()

        reply = await self.link.run(read, allowance=timeout)
        if reply is UNREACHABLE:
            raise SpillUnavailable(
                f"artifact {artifact_id} is in the shared spill store (Redis), which does not answer "
                "right now: try again in a few seconds"
            )
        (op, sha256, size, expires_at, ttl, receipt), payload, _ = reply
        unknown = f"no artifact {artifact_id} is kept for you (never made, or evicted)"
        if op is None or op.decode() != operator_key(operator):
            raise UnknownArtifact(unknown)
        ends, lives = float(expires_at), float(ttl)
        if ends <= now:
            if ends + lives <= now:
                raise UnknownArtifact(unknown)
            raise ArtifactExpired(f"artifact {artifact_id} has expired; call the tool again for a new one")
        if payload is None:  # evicted by Redis itself (maxmemory) before its time
            raise UnknownArtifact(unknown)
        return Artifact(
            artifact_id,
            operator,
            payload,
            sha256.decode(),
            ends,
            lives,
            _receipt.decode(receipt) if receipt else None,
            size=int(size),
        )

    async def remember(self, operator: str, route: str, call_key: str, artifact_ids: Sequence[str]) -> None:
        self._routes.add(route)
        kept_here = [held_by(i) == self.replica for i in artifact_ids]
        if all(kept_here):
            await self.local.remember(operator, route, call_key, artifact_ids)
            return
        if any(kept_here):
            return  # split between Redis and this replica: not remembered (the call may run again)
        op = operator_key(operator)
        keys = [self.link.key("spill-call", op, call_key), self.routes]
        args = [op, repr(self.clock()), self.link.key("spill-meta", ""), route, self.link.events, INDEX_TTL]
        await self.link.run(lambda: self._remember(keys=keys, args=[*args, *artifact_ids]))

    async def recall(self, operator: str, call_key: str) -> list[Artifact]:
        found = await self.local.recall(operator, call_key)
        if found:
            return found
        op = operator_key(operator)
        keys = [self.link.key("spill-call", op, call_key)]
        args = [op, repr(self.clock()), self.link.key("spill-meta", ""), self.link.key("spill", "")]
        reply = await self.link.run(lambda: self._recall(keys=keys, args=args))
        if reply is UNREACHABLE or not reply:
            return []
        artifacts = []
        for at in range(0, len(reply), 6):
            artifact_id, sha256, size, expires_at, ttl, receipt = reply[at : at + 6]
            artifacts.append(
                Artifact(
                    artifact_id.decode(),
                    operator,
                    b"",  # a denial needs what is beside the payload, not the payload
                    sha256.decode(),
                    float(expires_at),
                    float(ttl),
                    _receipt.decode(receipt) if receipt else None,
                    size=int(size),
                )
            )
        return artifacts

    def may_recall(self, route: str) -> bool:
        return route in self._routes  # the mirror: stale by one pub/sub delivery at most

    async def _reload(self) -> None:
        found = await self.link.run(lambda: self.link.client.smembers(self.routes))
        if found is not UNREACHABLE:
            self._routes |= {route.decode() for route in found}

    def _apply(self, event: list[str]) -> None:
        if event:
            self._routes.add(" ".join(event))


def _no_script(reply: Any) -> bool:
    """Whether a pipelined EVALSHA's reply says the server does not have the script."""
    from redis.exceptions import NoScriptError

    return isinstance(reply, NoScriptError)
