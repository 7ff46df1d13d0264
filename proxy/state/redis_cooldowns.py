"""Cooldown fences on a shared Redis: a 429 seen by any replica fences the provider on all.

    RedisCooldowns   CooldownBook: `frugal:cooldowns`, a hash of each fenced provider's end
                     (wall-clock seconds), expiring with the latest fence

`fence` and `lift` are one Lua script each (the later of two fences is kept, in Redis) and
publish the provider's new end on `<prefix>events`. `until`, read on every routed call, comes
from this replica's mirror of the hash, which RedisLink.watch keeps fresh: stale by one pub/sub
delivery (milliseconds) while connected, reloaded whole on every reconnect. A provider another
replica fenced is logged once, at info, when this replica sees it (`state: a cooldown from the
fleet`): a new fence, not each extension of a live one. While Redis is unreachable a fence still
fences this replica (the mirror), and the others learn of it only if a later fence reaches Redis.
"""

from __future__ import annotations

import logging
import time

from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink, seconds_until

log = logging.getLogger("frugal_proxy.state")

# KEYS[1] the hash; ARGV: provider, until, ttl (s), channel. Keeps the later end; returns it.
_FENCE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
local ends = ARGV[2]
if old and tonumber(old) > tonumber(ends) then ends = old end
redis.call('HSET', KEYS[1], ARGV[1], ends)
if redis.call('TTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
redis.call('PUBLISH', ARGV[4], 'cooldown ' .. ARGV[1] .. ' ' .. ends)
return ends
"""

# KEYS[1] the hash; ARGV: provider, channel.
_LIFT = """
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], 'cooldown ' .. ARGV[1] .. ' 0')
return 1
"""


class RedisCooldowns:
    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self.key = link.key("cooldowns")
        self._until: dict[str, float] = {}
        self._fence = link.script(_FENCE)
        self._lift = link.script(_LIFT)
        link.mirror("cooldown", self._reload, self._apply)

    def until(self, provider: str) -> float | None:
        return self._until.get(provider)  # the mirror: stale by one pub/sub delivery at most

    async def fence(self, provider: str, until: float) -> None:
        self._until[provider] = max(until, self._until.get(provider, until))
        reply = await self.link.call(
            self._fence, [self.key], [provider, repr(until), seconds_until(until), self.link.events]
        )
        if reply is not UNREACHABLE:
            self._until[provider] = max(float(reply), self._until[provider])

    async def lift(self, provider: str) -> None:
        self._until.pop(provider, None)
        await self.link.call(self._lift, [self.key], [provider, self.link.events])

    async def _reload(self) -> None:
        found = await self.link.run(lambda: self.link.client.hgetall(self.key))
        if found is UNREACHABLE:
            return
        now = time.time()
        self._until = {k.decode(): float(v) for k, v in found.items() if float(v) > now}

    def _apply(self, event: list[str]) -> None:
        if len(event) != 2:
            return
        provider, ends = event[0], float(event[1])
        if ends > 0:
            known = self._until.get(provider)
            self._until[provider] = ends
            now = time.time()
            if ends > now and (known is None or known <= now):  # fenced by another replica: say so once
                log.info(
                    "state: a cooldown from the fleet", extra={"provider": provider, "seconds": round(ends - now, 1)}
                )
        else:
            self._until.pop(provider, None)
