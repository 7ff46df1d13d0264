"""The replicas of a fleet that share one Redis (`[state] backend = "redis"`), as the status
page lists them.

    RedisReplicas   `frugal:replicas`, a sorted set of replica id -> the last time (wall-clock
                    seconds) it checked in; each replica checks in every BEAT_EVERY seconds
                    (`keep_beating`), and `seen` reads the set in one round trip

Bounded: a beat drops every replica not seen for FORGET_AFTER seconds, and the key expires
after twice that, so a fleet that stops leaves nothing behind. Never on a call's path: one
write every BEAT_EVERY seconds per replica, one read per poll of the page. While Redis does not
answer, a beat is skipped and `seen` says UNKNOWN (the page says it cannot tell), never None
(what the page reads as "one process: no shared backend").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink

BEAT_EVERY = 5.0
FORGET_AFTER = 60.0
UNKNOWN = "unreachable"  # what `seen` says while Redis does not answer


class RedisReplicas:
    def __init__(self, link: RedisLink, replica: str, clock: Callable[[], float] = time.time) -> None:
        self.link = link
        self.replica = replica
        self.clock = clock
        self.key = link.key("replicas")

    async def beat(self) -> bool:
        """Check in now; whether Redis took it."""
        now = self.clock()
        replies = await self.link.send(
            ("ZADD", self.key, repr(now), self.replica),
            ("ZREMRANGEBYSCORE", self.key, "-inf", repr(now - FORGET_AFTER)),
            ("EXPIRE", self.key, int(2 * FORGET_AFTER)),
        )
        return replies is not UNREACHABLE

    async def keep_beating(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Check in every BEAT_EVERY seconds, for the life of the process."""
        task_status.started()
        while True:
            await self.beat()
            await anyio.sleep(BEAT_EVERY)

    async def seen(self) -> list[dict[str, Any]] | str:
        """Each replica seen in the last FORGET_AFTER seconds, the most recent first, with when
        it last checked in; UNKNOWN when Redis does not answer."""
        since = repr(self.clock() - FORGET_AFTER)
        replies = await self.link.send(("ZRANGEBYSCORE", self.key, since, "+inf", "WITHSCORES"))
        if replies is UNREACHABLE:
            return UNKNOWN
        found = list(replies[0])
        if found and not isinstance(found[0], list | tuple):  # a flat reply: member, score, member …
            found = [found[n : n + 2] for n in range(0, len(found) - 1, 2)]
        pairs = [(_text(member), float(score)) for member, score in found]
        pairs.sort(key=lambda pair: -pair[1])
        return [{"replica": name, "seen_at": at, "self": name == self.replica} for name, at in pairs]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
