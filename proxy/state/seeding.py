"""A store being rebuilt after a restart: its reservations wait until the rebuild is done.

`serve` reads the usage ledger in a worker thread once it serves (pipeline.assembly's Feeds):
from `hold` until `done`, `wait` blocks, so no reservation goes ahead on a counter that does not
yet hold what was spent before the restart. Reads (routing's ordering, a skip) do not wait: the
reservation just before a provider is called is the check that counts. A routed call waits no
longer than its deadline: then the reservation raises `StillSeeding` and is not made.
"""

from __future__ import annotations

import time

import anyio


class StillSeeding(Exception):
    """The call's deadline ran out while the usage ledger was still being read."""

    def __init__(self) -> None:
        super().__init__(
            "the usage ledger from before the restart was still being read when the call's deadline ran out; "
            "try again in a few seconds"
        )


class Seeding:
    def __init__(self) -> None:
        self._pending: anyio.Event | None = None

    def hold(self) -> None:
        """The rebuild begins: `wait` blocks from now."""
        self._pending = anyio.Event()

    def done(self) -> None:
        """The rebuild is over (seeded, failed or cancelled): the waiting reservations go ahead."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.set()

    async def wait(self, deadline: float | None = None) -> None:
        """Return once no rebuild is going on; raise StillSeeding if `deadline` (on
        time.monotonic, the clock of a call's deadline) comes first."""
        pending = self._pending
        if pending is None:
            return
        if deadline is None:
            await pending.wait()
            return
        with anyio.move_on_after(deadline - time.monotonic()):
            await pending.wait()
            return
        raise StillSeeding
