"""Spend today and free-quota units this month on a shared Redis: exact across replicas.

    RedisSpend   SpendBook: `frugal:spend:<UTC day>`, a hash of micro-dollars per
                 `capability/provider`, expiring an hour after that day's midnight
    RedisUsage   UsageCounter: `frugal:usage:<UTC month>`, a hash of units per provider,
                 expiring a day after that month's end

Each reservation and release is one Lua script (one round trip): the check and the add happen in
Redis in one step, so concurrent calls on any number of replicas overshoot a cap by nothing more
than the memory store does (a call that lands exactly on it goes ahead, none goes past it). The
script publishes the new total on `<prefix>events` when it changes what routing decides: a
reservation after which the next call of that price (or the next unit) no longer fits, and every
release. `spent` and `calls_this_month` (routing's reads, never the check that counts) come from
this replica's mirror of those totals, which RedisLink.watch keeps fresh: its verdict (fits or
not) is stale by one pub/sub delivery (milliseconds) while connected, its figure may lag the
reservations that left room after it (another replica's, not published: a pub/sub message per
call costs every replica CPU), and it is reloaded whole on every reconnect.

Which wins after a restart: a hash holds a `~seeded` field once some replica has added the
ledger's figures to it. With it, Redis holds the day and no ledger is replayed (`seed` is a
no-op); without it (a new day, or Redis flushed or lost), the first replica to notice adds what
its ledger files say was billed (`rebuild`, given by the assembly) and sets the field; a
reservation that finds the field gone waits for that rebuild. The field's value names that
seeding, and a reservation carries it: a call in flight at a flush that then does not bill takes
nothing back from the re-seeded hash, which never held its price. A call in flight at a flush that
does bill is counted by neither (the rebuild read the ledger before its line), until the next
rebuild: a flush mid-day can let at most the calls in flight at that moment through beyond a cap.

While Redis is unreachable, `reserve` raises Unreachable (the budget and the routing policy skip
the provider with `state: redis unreachable`) and a `release` is lost: its reservation stays
counted, which errs on the side of the cap.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping

import anyio

from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink, Unreachable, seconds_until
from frugal_proxy.state.seeding import Seeding
from frugal_proxy.state.spend import seconds_to_midnight, utc_day
from frugal_proxy.state.usage import utc_month

SEEDED = "~seeded"
# Between a reservation's period and the seeding of the hash it was made in (`2026-12-03@9f…`).
_SEEDING_MARK = "@"
UNSEEDED = -1

# KEYS[1] the hash; ARGV: field, amount, limit, ttl (s), channel, event prefix. Returns {granted,
# total, seeding}: granted 1 when amount was added within limit, 0 when it would pass it, -1 when
# the hash has not been seeded (new, flushed or lost); seeding is the `~seeded` field's value, which
# names this seeding of the hash (a release after a flush and a re-seed must not take back what
# the new hash never held). The new total is published only when another call of the same amount
# would no longer fit: the one change the other replicas' routing reads act on.
_RESERVE = """
local seeding = redis.call('HGET', KEYS[1], '~seeded')
if not seeding then return {-1, 0, ''} end
local total = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local amount = tonumber(ARGV[2])
if total + amount > tonumber(ARGV[3]) then return {0, total, seeding} end
total = redis.call('HINCRBY', KEYS[1], ARGV[1], amount)
redis.call('EXPIRE', KEYS[1], ARGV[4])
if total + amount > tonumber(ARGV[3]) then
  redis.call('PUBLISH', ARGV[5], ARGV[6] .. ' ' .. ARGV[1] .. ' ' .. total)
end
return {1, total, seeding}
"""

# KEYS[1] the hash; ARGV: field, amount, channel, event prefix, the seeding the reservation was made
# in. Takes back at most what is there, and nothing (-1) from another seeding of the hash.
_RELEASE = """
if redis.call('HGET', KEYS[1], '~seeded') ~= ARGV[5] then return -1 end
local total = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local back = math.min(total, tonumber(ARGV[2]))
total = redis.call('HINCRBY', KEYS[1], ARGV[1], -back)
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. ARGV[1] .. ' ' .. total)
return total
"""

# KEYS[1] the hash; ARGV: ttl (s), this seeding's random name, then field, amount pairs. Adds them
# only if no replica has.
_SEED = """
if redis.call('HSETNX', KEYS[1], '~seeded', ARGV[2]) == 0 then return 0 end
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""

Rebuild = Callable[[str], Awaitable[Mapping[str, int]]]


async def _nothing(period: str) -> Mapping[str, int]:
    return {}


class _Counters:
    """A hash of exact integer counters per period (a UTC day, a UTC month) on Redis."""

    kind = ""

    def __init__(self, link: RedisLink, clock: Callable[[], float], rebuild: Rebuild = _nothing) -> None:
        self.link = link
        self.clock = clock
        self.rebuild = rebuild  # what the ledger says was counted in a period: after a flush
        self.seeding = Seeding()
        self._period = ""
        self._mirror: dict[str, int] = {}
        self._reserve = link.script(_RESERVE)
        self._release = link.script(_RELEASE)
        self._seed = link.script(_SEED)
        self._rebuilding = anyio.Lock()
        link.mirror(self.kind, self._reload, self._apply)

    def _now_period(self) -> str:
        raise NotImplementedError

    def _ttl(self) -> int:
        raise NotImplementedError

    def _roll(self) -> str:
        period = self._now_period()
        if period != self._period:
            self._period, self._mirror = period, {}
        return period

    def _key(self, period: str) -> str:
        return self.link.key(self.kind, period)

    def _count(self, field: str) -> int:
        self._roll()
        return self._mirror.get(field, 0)

    async def _reload(self) -> None:
        period = self._roll()
        found = await self.link.run(lambda: self.link.client.hgetall(self._key(period)))
        if found is UNREACHABLE or period != self._period:
            return
        self._mirror = {k.decode(): int(v) for k, v in found.items() if k != SEEDED.encode()}

    def _apply(self, event: list[str]) -> None:
        if len(event) == 3 and event[0] == self._roll():
            self._mirror[event[1]] = int(event[2])

    async def _add(self, field: str, amount: int, limit: int) -> str | None:
        period = self._roll()
        for _ in range(2):
            reply = await self.link.call(
                self._reserve,
                [self._key(period)],
                [field, amount, limit, self._ttl(), self.link.events, f"{self.kind} {period}"],
            )
            if reply is UNREACHABLE:
                raise Unreachable
            granted, total = int(reply[0]), int(reply[1])
            if granted == UNSEEDED:
                await self._seed_from_ledger(period)
                continue
            if period == self._period:
                self._mirror[field] = total
            seeding = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
            return f"{period}{_SEEDING_MARK}{seeding}" if granted else None
        raise Unreachable  # seeded and gone again at once: treat as not answering

    async def _take_back(self, field: str, amount: int, reservation: str) -> None:
        period, _, seeding = reservation.partition(_SEEDING_MARK)
        if period != self._roll():
            return
        total = await self.link.call(
            self._release, [self._key(period)], [field, amount, self.link.events, f"{self.kind} {period}", seeding]
        )
        if total is not UNREACHABLE and int(total) >= 0 and period == self._period:
            self._mirror[field] = int(total)

    async def _seed_from_ledger(self, period: str) -> None:
        """The hash has no `~seeded` field: add what the ledger says, unless another call (here or
        on another replica) has meanwhile."""
        async with self._rebuilding:
            found = await self.link.run(lambda: self.link.client.hexists(self._key(period), SEEDED))
            if found is UNREACHABLE:
                raise Unreachable
            if not found:
                await self.add_seed(await self.rebuild(period), period)

    async def add_seed(self, counts: Mapping[str, int], period: str) -> bool:
        """Add `counts` (the ledger's, from before this process served) to the period's hash if
        no replica has seeded it yet: False when Redis already held the period (it wins)."""
        args: list[str | int] = [self._ttl(), secrets.token_hex(8)]
        for field, amount in counts.items():
            args += [field, amount]
        reply = await self.link.call(self._seed, [self._key(period)], args)
        if reply is UNREACHABLE:
            raise Unreachable
        await self._reload()
        return bool(reply)

    async def seed_period(self, counts: Mapping[str, int], period: str) -> None:
        """The start-up rebuild: seed if Redis does not hold the period yet, then let the waiting
        reservations go ahead (seeded, held already, or unreachable: reserve says so then)."""
        try:
            if period == self._roll():
                await self.add_seed(counts, period)
        except Unreachable:
            pass
        finally:
            self.seeding.done()


class RedisSpend(_Counters):
    kind = "spend"

    def _now_period(self) -> str:
        return utc_day(self.clock())

    def _ttl(self) -> int:
        return seconds_until(self.clock() + seconds_to_midnight(self.clock()) + 3600)

    @property
    def reachable(self) -> bool:
        return not self.link.degraded

    def spent(self, key: str) -> int:
        return self._count(key)  # the mirror: stale by one pub/sub delivery at most

    async def reserve(self, key: str, micros: int, cap: int, deadline: float | None = None) -> str | None:
        await self.seeding.wait(deadline)
        return await self._add(key, micros, cap)

    async def release(self, key: str, micros: int, day: str) -> None:
        await self._take_back(key, micros, day)


class RedisUsage(_Counters):
    kind = "usage"

    def _now_period(self) -> str:
        return utc_month(self.clock())

    def _ttl(self) -> int:
        now = self.clock()
        return seconds_until(now + 32 * 86_400)  # past the month's end wherever in it we are

    @property
    def reachable(self) -> bool:
        return not self.link.degraded

    def calls_this_month(self, provider: str) -> int:
        return self._count(provider)  # the mirror: stale by one pub/sub delivery at most

    async def reserve(self, provider: str, quota: int, deadline: float | None = None) -> str | None:
        await self.seeding.wait(deadline)
        return await self._add(provider, 1, quota)

    async def release(self, provider: str, month: str) -> None:
        await self._take_back(provider, 1, month)
