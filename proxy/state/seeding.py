"""A store being rebuilt after a restart: its reservations wait until the rebuild is done.

`serve` reads the usage ledger in a worker thread once it serves (pipeline.assembly's Feeds):
from `hold` until `done`, `wait` blocks, so no reservation goes ahead on a counter that does not
yet hold what was spent before the restart. Reads (routing's ordering, a skip) do not wait: the
reservation just before a provider is called is the check that counts.
"""

from __future__ import annotations

import anyio


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

    async def wait(self) -> None:
        if self._pending is not None:
            await self._pending.wait()
