"""Session-era clients over Streamable HTTP: one `Mcp-Session-Id`, one `Router`, one set of
upstream connections each.

A Router owns its upstream connections' handlers (server requests and notifications reach the
one client it serves), so a session-era client cannot share the upstreams of the endpoint's
stateless Router: `initialize` starts a new set (new child processes for stdio upstreams, from
the same config), which follow the client's era: a dual-era upstream is initialized with the
client's own params, so its server-to-client requests reach the client as they would directly.
What the proxy sends to the client unasked (server requests, notifications)
waits in a bounded outbox until the client's standalone GET stream carries it (events).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.router.router import Router
from frugal_proxy.server.events import EventLogs
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import run

log = logging.getLogger("frugal_proxy.http_sessions")

DRAIN_SECONDS = 5.0
# After its `initialize` is answered, a session whose client sends nothing more on it (not even
# `notifications/initialized`) within this many seconds is dropped: an abandoned handshake must
# not hold a session slot (and its upstreams) until the idle timeout.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0


@dataclass
class UpstreamSet:
    """How to build the upstream connections a Router serves, as often as needed."""

    make: Callable[[], list[UpstreamBase]]
    # Router keyword arguments; `governor` (GovernorSettings) is what the endpoint assembles
    # the pipeline from, with its metrics (pipeline.assembly)
    options: dict[str, Any] = field(default_factory=dict)
    lazy: frozenset[str] = frozenset()


class Outbox:
    """Messages for a session-era client that are not replies (server requests, notifications):
    numbered into the session's standalone event log, where they wait (bounded) until its GET
    stream takes them, and stay a while for `Last-Event-ID` resumption."""

    def __init__(self) -> None:
        self.events = EventLogs()

    async def send(self, frame: Frame | list[Frame]) -> None:
        self.events.standalone.append(jsonrpc.encode(frame))

    def close(self) -> None:
        """No more messages; a GET stream still open delivers what is held, then ends."""
        self.events.close()


@dataclass(eq=False)
class HttpSession:
    id: str
    session: Router
    peer: DownstreamPeer
    outbox: Outbox
    ended: anyio.Event = field(default_factory=anyio.Event)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0  # requests in flight plus open GET streams
    confirmed: bool = False  # the client has used the session since its initialize was answered
    settled: anyio.Event = field(default_factory=anyio.Event)  # confirmed or ended

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def confirm(self) -> None:
        """The client came back with the session id: its handshake went through."""
        self.confirmed = True
        self.settled.set()


class HttpSessions:
    """Every live session-era session, by id; idle ones expire."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        upstreams: UpstreamSet,
        *,
        idle_timeout: float,
        max_sessions: int,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    ) -> None:
        self._tg = task_group
        self._upstreams = upstreams
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.max_sessions = max_sessions
        self._sessions: dict[str, HttpSession] = {}
        self._opening: set[str] = set()  # ids of sessions started but not yet registered
        self._running = 0
        self._all_done = anyio.Event()

    def __len__(self) -> int:
        """Live sessions plus those being opened (so that a burst cannot pass the bound)."""
        return len(self._sessions) + len(self._opening)

    def get(self, session_id: str) -> HttpSession | None:
        return self._sessions.get(session_id)

    async def open(self) -> HttpSession:
        """A new session with its own upstream connections (started, not necessarily ready)."""
        session_id = secrets.token_urlsafe(32)
        self._opening.add(session_id)  # before any await: the caller's bound check and this count are one step
        try:
            started: HttpSession = await self._tg.start(self._run, session_id)
        finally:
            self._opening.discard(session_id)
        return started

    def end(self, session_id: str) -> bool:
        entry = self._sessions.pop(session_id, None)
        if entry is None:
            return False
        entry.ended.set()
        entry.settled.set()
        return True

    def await_handshake(self, entry: HttpSession) -> None:
        """Drop `entry` unless its client uses it within the handshake timeout (from now, when
        its initialize has been answered)."""

        async def watch() -> None:
            with anyio.move_on_after(self.handshake_timeout):
                await entry.settled.wait()
            if not entry.confirmed and entry.busy == 0 and self.end(entry.id):
                log.warning(
                    "session dropped: its client sent nothing after initialize (no notifications/initialized)",
                    extra={"seconds": self.handshake_timeout, "sessions": len(self)},
                )

        self._tg.start_soon(watch)

    def close_streams(self) -> None:
        """End every standalone GET stream (at shutdown); sessions keep serving their requests."""
        for entry in self._sessions.values():
            entry.outbox.events.standalone.close()

    async def end_all(self) -> None:
        """End every session and wait until each has drained and shut its upstreams down."""
        for session_id in list(self._sessions):
            self.end(session_id)
        while self._running:
            self._all_done = anyio.Event()
            await self._all_done.wait()

    async def expire_idle(self) -> None:
        """End sessions nobody has used for `idle_timeout` seconds (and that have no stream open)."""
        while True:
            await anyio.sleep(min(30.0, max(0.1, self.idle_timeout / 4)))
            cutoff = time.monotonic() - self.idle_timeout
            for entry in list(self._sessions.values()):
                if entry.busy == 0 and entry.last_used < cutoff:
                    log.info("session expired after being idle")
                    self.end(entry.id)

    async def _run(self, session_id: str, *, task_status: anyio.abc.TaskStatus[HttpSession]) -> None:
        self._running += 1
        try:
            await self._serve(session_id, task_status)
        finally:
            self._running -= 1
            self._all_done.set()

    async def _serve(self, session_id: str, task_status: anyio.abc.TaskStatus[HttpSession]) -> None:
        upstreams = self._upstreams.make()
        for upstream in upstreams:
            upstream.follow_client("legacy")  # its own connections speak its era where they can
        outbox = Outbox()
        peer = DownstreamPeer(outbox)
        async with run(upstreams, lazy=self._upstreams.lazy) as running:
            session = Router(upstreams, peer, running.task_group, **self._upstreams.options)
            entry = HttpSession(session_id, session, peer, outbox)
            self._sessions[session_id] = entry
            self._opening.discard(session_id)  # counted once: registered, no longer opening
            task_status.started(entry)
            await entry.ended.wait()
            with anyio.move_on_after(DRAIN_SECONDS):
                await session.drain()
            peer.close()
            outbox.close()
