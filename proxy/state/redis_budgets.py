"""The budgets operators set for themselves (`POST /budgets`) on a shared Redis: set through one
replica, they hold on every replica.

    RedisBudgets   `frugal:budgets`, a hash of operator → its overrides (the governor's JSON),
                   expiring OVERRIDES_TTL after the last change; each change is one Lua script
                   that writes the hash and publishes the new value on `<prefix>events`

The governor reads an operator's budgets on every call from its own copy, which this store
keeps fresh: `follow` hands it each change as it is published (one pub/sub delivery behind,
milliseconds) and the whole hash again on every (re)connect. While Redis is unreachable a change
is refused (`save` answers False: nothing is changed anywhere) and every replica keeps serving
with the budgets it last saw.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from frugal_proxy.state.redis_link import UNREACHABLE, RedisLink

OVERRIDES_TTL = 30 * 24 * 3600  # seconds after the last change of any operator's budgets

# KEYS[1] the hash. ARGV: operator, value ('' removes it), ttl (s), channel, the event.
_SAVE = """
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""


class _Change(msgspec.Struct, frozen=True):
    operator: str
    value: msgspec.Raw  # the overrides' JSON; null: removed


_encoder = msgspec.json.Encoder()
_change = msgspec.json.Decoder(_Change)

Changed = Callable[[str, bytes | None], None]
Replaced = Callable[[dict[str, bytes]], None]


class RedisBudgets:
    def __init__(self, link: RedisLink) -> None:
        self.link = link
        self.key = link.key("budgets")
        self._save = link.script(_SAVE)
        self._changed: Changed | None = None
        self._replaced: Replaced | None = None
        link.mirror("budgets", self._reload, self._apply)

    def follow(self, changed: Changed, replaced: Replaced) -> None:
        """Hand every change to `changed(operator, value or None)`, and the whole hash to
        `replaced` each time it is read again."""
        self._changed, self._replaced = changed, replaced

    async def save(self, operator: str, value: bytes | None) -> bool:
        """Set (or, with None, remove) one operator's overrides fleet-wide; False when Redis did
        not answer (nothing changed)."""
        event = b"budgets " + _encoder.encode(_Change(operator, msgspec.Raw(value or b"null")))
        args = [operator, value or b"", OVERRIDES_TTL, self.link.events, event]
        reply = await self.link.run(lambda: self._save(keys=[self.key], args=args))
        return reply is not UNREACHABLE

    async def _reload(self) -> None:
        found = await self.link.run(lambda: self.link.client.hgetall(self.key))
        if found is not UNREACHABLE and self._replaced is not None:
            self._replaced({operator.decode(): value for operator, value in found.items()})

    def _apply(self, event: list[str]) -> None:
        try:
            change = _change.decode(" ".join(event))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # written by another version
        if self._changed is not None:
            value = bytes(change.value)
            self._changed(change.operator, None if value == b"null" else value)
