"""Writes finished in one event-loop turn, coalesced into one.

A pipe's writer hands the first message of a turn to the pipe at once and then `cork`s: the
messages offered after it in the same turn are `hold`-ed, and when the turn ends (`uncork`, run
by the loop) they go to `send` joined, one system call and one wake-up of the reader. A lone
message waits for nothing. `send` says whether what it was given went whole; then the next turn
is corked too, so that replies finished together keep going out together.

A reader that has read several messages at once knows that more writes follow the first:
`hold_turn` holds that first one too, so that the turn's messages cost one write, not two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Coalescer:
    """The held messages of one writer, and whether a write went out in this loop turn."""

    __slots__ = ("_held", "_loop", "_send", "corked", "held_bytes")

    def __init__(self, send: Callable[[bytes], bool]) -> None:
        self._send = send
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of the first cork
        self._held: list[bytes] = []
        self.corked = False  # a write went out in this turn: what is offered now is held
        self.held_bytes = 0

    def hold(self, data: bytes) -> None:
        self._held.append(data)
        self.held_bytes += len(data)

    def cork(self) -> None:
        """A write just went out: hold what comes in this turn, and send it when the turn ends."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self.corked = True
        self._loop.call_soon(self.uncork)

    def hold_turn(self) -> None:
        """Hold whatever is offered until this loop turn ends, the first message too (the reader
        has more to answer in this turn)."""
        if not self.corked:
            self.cork()

    def uncork(self) -> None:
        """Send what is held, joined (also called before a write that must follow it in order)."""
        self.corked = False
        if not self._held:
            return
        data = b"".join(self._held)
        self._held.clear()
        self.held_bytes = 0
        if self._send(data):
            self.cork()
