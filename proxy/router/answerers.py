"""How the stdio router gets its requests answered without a task or a timer per request.

Answerers   the tasks that answer requests: one reused per request in flight, a new one
            spawned only when none waits
Deadlines   the deadlines of the plain calls in flight (Router._plain_call), one timer for
            all of them
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio.abc

from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.records import Exchange

log = logging.getLogger("frugal_proxy.session")  # the router's: one logger for a session's requests

Work = tuple[Frame, Exchange | None]  # a request, and the exchange `_plain_call` opened for it


class Expiring(Protocol):
    """A call whose deadline Deadlines keeps: when it runs out (loop time) and what then."""

    due: float

    def expire(self) -> None: ...


class Deadlines:
    """The deadlines of the plain calls in flight, kept by one timer: a link's deadline is the
    same for each of its calls, so they run out in the order they started, and watching one
    costs a dict entry instead of a timer of its own."""

    def __init__(self) -> None:
        self._calls: dict[Expiring, None] = {}  # in the order their deadlines run out
        self._timer: asyncio.TimerHandle | None = None
        # The loop of the first watch, kept: on Python 3.11 each get_running_loop() is a getpid()
        # system call, and this runs once per plain call.
        self._loop: asyncio.AbstractEventLoop | None = None

    def watch(self, call: Expiring, seconds: float) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        call.due = loop.time() + seconds
        self._calls[call] = None
        if self._timer is None:
            self._timer = loop.call_at(call.due, self._run_out)

    def unwatch(self, call: Expiring) -> None:
        self._calls.pop(call, None)

    def _run_out(self) -> None:
        self._timer = None
        loop = self._loop
        assert loop is not None
        now = loop.time()
        while self._calls:
            call = next(iter(self._calls))
            if call.due > now:
                self._timer = loop.call_at(call.due, self._run_out)
                return
            del self._calls[call]
            try:
                call.expire()
            except Exception:  # one call's failure must not leave the calls after it unexpired
                log.warning("a plain call's deadline ran out and could not be answered", exc_info=True)


class Answerers:
    """The tasks that answer stdio requests, each request on a task of its own while it runs.

    A task spawned per request costs about 25 µs of CPU on the asyncio backend (its handle, cancel
    scope and event), a tenth of the proxy's whole work on a small call; so a task that has
    answered waits for the next request instead of ending, and a request is handed to a waiting
    one (a future's result: one loop turn, as a new task's first step would be). A new task is
    spawned only when none waits, and at most `MAX_IDLE` wait, so a burst leaves none behind.
    They are the task group's, as spawned tasks were: cancelled with it, their errors its own.
    """

    MAX_IDLE = 64

    def __init__(
        self, task_group: anyio.abc.TaskGroup, answer: Callable[[Frame, Exchange | None], Awaitable[None]]
    ) -> None:
        self._tg = task_group
        self._answer = answer
        self._idle: list[asyncio.Future[Work | None]] = []

    def close(self) -> None:
        """No more requests come: the waiting tasks end (those still answering end after)."""
        idle, self._idle = self._idle, []
        for waiter in idle:
            if not waiter.done():
                waiter.set_result(None)

    def submit(self, frame: Frame, resume: Exchange | None = None) -> None:
        """Answer the request on a task; with `resume`, its exchange goes on from `Pipeline.open`."""
        work = (frame, resume)
        while self._idle:
            waiter = self._idle.pop()
            if not waiter.done():  # a cancelled waiter is a task that has ended
                waiter.set_result(work)
                return
        self._tg.start_soon(self._work, work)

    async def _work(self, work: Work) -> None:
        loop = asyncio.get_running_loop()
        next_work: Work | None = work
        while next_work is not None:
            await self._answer(*next_work)
            if len(self._idle) >= self.MAX_IDLE:
                return
            waiter: asyncio.Future[Work | None] = loop.create_future()
            self._idle.append(waiter)
            next_work = await waiter
