"""The routed tools' result cache on a shared Redis: an answer paid for once serves every replica.

    RedisResultCache   ResultCache: `frugal:cache:<fingerprint>`, one encoded answer, expiring
                       with its TTL (`cache.search_ttl`, `cache.extract_ttl`); `frugal:cache-index`,
                       a sorted set of the keys by when they were stored

Memory is bounded twice: an answer over `max_entry_bytes` encoded (1 MiB by default) is not
kept, and each `put` trims the index to `cache.max_entries`, the oldest stored going first (by
age, not by use: a hit costs one GET and no write). A put is one Lua script; a get one GET,
which `lookup` queues to go with the admit phase's next command (the loop guard's script): one
round trip for both. While Redis is unreachable every get misses and a put is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec

from frugal_proxy.capabilities import Page, SearchHit
from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink, Ride
from frugal_proxy.state.result_cache import CachedResult, Lookup

MAX_ENTRY_BYTES = 1 << 20

# KEYS[1] the entry, KEYS[2] the index; ARGV: value, ttl (ms), now, max entries, index ttl (s).
_PUT = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if extra > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], extra)
  for i = 1, #popped, 2 do
    if popped[i] ~= KEYS[1] then redis.call('DEL', popped[i]) end
  end
end
if redis.call('TTL', KEYS[2]) < tonumber(ARGV[5]) then redis.call('EXPIRE', KEYS[2], ARGV[5]) end
return 1
"""


class _Entry(msgspec.Struct, frozen=True, array_like=True):
    provider: str
    kind: str  # "hits", "page" or "json"
    stored_at: float
    expires_at: float
    data: msgspec.Raw


_encoder = msgspec.json.Encoder()
_entry = msgspec.json.Decoder(_Entry)
_hits = msgspec.json.Decoder(list[SearchHit])
_page = msgspec.json.Decoder(Page)
_any = msgspec.json.Decoder()


def _kind(data: Any) -> str:
    if isinstance(data, Page):
        return "page"
    if isinstance(data, list) and data and all(isinstance(hit, SearchHit) for hit in data):
        return "hits"
    return "json"


class RedisResultCache:
    def __init__(
        self,
        link: RedisLink,
        max_entries: int = 512,
        max_entry_bytes: int = MAX_ENTRY_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.link = link
        self.max_entries = max_entries
        self.max_entry_bytes = max_entry_bytes
        self.clock = clock
        self.index = link.key("cache-index")
        self._put = link.script(_PUT)

    async def get(self, key: str) -> CachedResult | None:
        return await self.lookup(key)

    def lookup(self, key: str) -> Lookup:
        ride = self.link.ride("GET", self.link.key("cache", key))
        return Lookup(lambda: self._read(ride))

    async def _read(self, ride: Ride) -> CachedResult | None:
        raw = await self.link.take(ride)
        if raw is UNREACHABLE or raw is None:
            return None
        try:
            entry = _entry.decode(raw)
            data: Any
            if entry.kind == "hits":
                data = _hits.decode(entry.data)
            elif entry.kind == "page":
                data = _page.decode(entry.data)
            else:
                data = _any.decode(entry.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None  # written by another version: a miss, overwritten by the next put
        if entry.expires_at <= self.clock():
            return None
        return CachedResult(entry.provider, data, entry.stored_at, entry.expires_at)

    async def put(self, key: str, provider: str, data: Any, ttl: float) -> None:
        now = self.clock()
        value = _encoder.encode(_Entry(provider, _kind(data), now, now + ttl, msgspec.Raw(_encoder.encode(data))))
        if len(value) > self.max_entry_bytes:
            return
        args = [value, max(1, int(ttl * 1000)), repr(now), self.max_entries, int(ttl) + 1]
        await self.link.call(self._put, [self.link.key("cache", key), self.index], args)
