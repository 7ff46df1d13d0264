"""Loop-guard windows on a shared Redis: identical calls are counted fleet-wide.

    RedisCallWindows   CallWindows: `frugal:loop:<fingerprint>`, a sorted set of the times the
                       call was seen, trimmed to the window and to MAX_TIMES, expiring with the
                       window

Only the fingerprint (a blake3 digest) and times are stored. One Lua script a call: drop what
left the window, add this call, trim, set the expiry, answer the times. While Redis is
unreachable the windows count on this replica alone (a local MemoryCallWindows), so the guard
still stops a loop that stays on one replica.
"""

from __future__ import annotations

import os

from frugal_proxy.state.call_windows import MAX_TIMES, MemoryCallWindows
from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink

# KEYS[1] the set; ARGV: now, cutoff (times <= it have left), keep, member, ttl (ms).
_NOTE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1) end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
"""


class RedisCallWindows:
    def __init__(self, link: RedisLink, max_times: int = MAX_TIMES) -> None:
        self.link = link
        self.max_times = max_times
        self.local = MemoryCallWindows(max_times=max_times)  # while Redis is unreachable
        self._note = link.script(_NOTE)

    async def note(self, key: str, now: float, window: float, keep: int) -> list[float]:
        member = f"{now!r}:{os.urandom(6).hex()}"  # two calls in the same microsecond are two
        args = [repr(now), repr(now - window), max(keep, self.max_times), member, max(1, int(window * 1000) + 1)]
        reply = await self.link.call(self._note, [self.link.key("loop", key)], args)
        if reply is UNREACHABLE:
            return await self.local.note(key, now, window, keep)
        return [float(score) for score in reply[1::2]]
