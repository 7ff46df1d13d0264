"""Session-era clients over Streamable HTTP: one `Mcp-Session-Id`, one `Router` each, and
upstream connections shared with the other sessions that declare the same.

A session-era client cannot share the upstreams of the endpoint's stateless Router (a Router owns
its connections' handlers). Its `initialize` decides, per upstream: sessions of one operator that
ask for the same protocol version and declare the same capabilities (no roots; sampling or
elicitation only for an HTTP upstream, which names the call a server request belongs to) share
one connection (upstream.shared: what it sends unasked is routed to the sessions it concerns);
any other session, any session of an upstream with `share = false`, and every
2024-11-05 HTTP+SSE session, gets a connection of its own (a new child process for a stdio
upstream), which follows the client's era: a dual-era upstream is initialized with the client's
own params, so its server-to-client requests reach the client as they would directly.
What the proxy sends to the client unasked (server requests, notifications)
waits in a bounded outbox until the client's standalone GET stream carries it (events).
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.identities import LOCAL
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.router.router import Router
from frugal_proxy.server.events import EventLogs
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import Fleet, run
from frugal_proxy.upstream.shared import SharedUpstreams, SharedView, share_key

log = logging.getLogger("frugal_proxy.http_sessions")

DRAIN_SECONDS = 5.0
# After its `initialize` is answered, a session whose client sends nothing more on it (not even
# `notifications/initialized`) within this many seconds is dropped: an abandoned handshake must
# not hold a session slot (and its upstreams) until the idle timeout.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
# At `--max-sessions`, a new session takes the place of the one quiet longest (nothing in
# flight, no GET stream open) once it has been quiet this many seconds: a client that went away
# without DELETE must not hold a slot until the idle timeout.
DEFAULT_RECLAIM_AFTER = 60.0
# The refusal at the session cap: the server is full for now, not faulty (-32603 says it broke).
# JSON-RPC 2.0 leaves -32000..-32099 to the implementation and MCP takes -32020..-32099, so this
# is -32000, the code the SDKs' own HTTP transports refuse with; over HTTP 503 with Retry-After.
SESSIONS_FULL = -32000


@dataclass
class UpstreamSet:
    """How to build the upstream connections a Router serves, as often as needed."""

    make: Callable[[], list[UpstreamBase]]
    # Router keyword arguments; `governor` (GovernorSettings) is what the endpoint assembles
    # the pipeline from, with its metrics (pipeline.assembly)
    options: dict[str, Any] = field(default_factory=dict)
    lazy: frozenset[str] = frozenset()
    # The upstreams by name, for the connections sessions share (None: no sharing, each session
    # gets `make()`'s)
    fleet: Fleet | None = None


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
        reclaim_after: float = DEFAULT_RECLAIM_AFTER,
        replica: str | None = None,
    ) -> None:
        self._tg = task_group
        # A session id begins with the replica's id (`replica-1.…`), so that a load balancer
        # that cannot learn ids from responses (nginx without Plus) routes by the prefix.
        self._id_prefix = f"{replica}." if replica else ""
        self._upstreams = upstreams
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.reclaim_after = reclaim_after
        self.max_sessions = max_sessions
        self._sessions: dict[str, HttpSession] = {}
        self._opening: set[str] = set()  # ids of sessions started but not yet registered
        self._running = 0
        self._all_done = anyio.Event()
        fleet = upstreams.fleet
        self.shared = SharedUpstreams(task_group, fleet.connect_one, lazy=upstreams.lazy) if fleet is not None else None

    def __len__(self) -> int:
        """Live sessions plus those being opened (so that a burst cannot pass the bound)."""
        return len(self._sessions) + len(self._opening)

    def make_room(self) -> tuple[str, int] | None:
        """None when a new session may open: under `max_sessions`, or at it once the session
        quiet longest, for `reclaim_after` seconds at least, has been ended to make room. Else why
        not and the seconds after which to try again."""
        if len(self) < self.max_sessions:
            return None
        now = time.monotonic()
        quiet = [entry for entry in self._sessions.values() if entry.busy == 0]
        oldest = min(quiet, key=lambda entry: entry.last_used, default=None)
        if oldest is not None and now - oldest.last_used >= self.reclaim_after:
            self.end(oldest.id)
            log.warning(
                "session ended to make room at --max-sessions: the one quiet longest",
                extra={"quiet_seconds": round(now - oldest.last_used), "sessions": len(self)},
            )
            return None
        wait = oldest.last_used + self.reclaim_after - now if oldest is not None else self.reclaim_after
        message = (
            f"too many sessions ({self.max_sessions}); none has been quiet for {self.reclaim_after:g} s "
            "(--session-reclaim-after) to make room: end one with DELETE, try again after Retry-After, "
            "or raise --max-sessions"
        )
        return message, max(1, math.ceil(wait))

    def get(self, session_id: str) -> HttpSession | None:
        return self._sessions.get(session_id)

    async def open(self, initialize: Mapping[str, msgspec.Raw] | None = None, *, operator: str = LOCAL) -> HttpSession:
        """A new session (its connections started, not necessarily ready), belonging to
        `operator`, whose token opened it; `initialize`, the params of the client's initialize,
        and the operator decide which upstream connections it shares (only with sessions of the
        same operator)."""
        session_id = self._id_prefix + secrets.token_urlsafe(32)
        self._opening.add(session_id)  # before any await: the caller's bound check and this count are one step
        try:
            started: HttpSession = await self._tg.start(self._run, session_id, initialize, operator)
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
        if self.shared is not None:
            self.shared.close_all()

    async def expire_idle(self) -> None:
        """End sessions nobody has used for `idle_timeout` seconds (and that have no stream open)."""
        while True:
            await anyio.sleep(min(30.0, max(0.1, self.idle_timeout / 4)))
            cutoff = time.monotonic() - self.idle_timeout
            for entry in list(self._sessions.values()):
                if entry.busy == 0 and entry.last_used < cutoff:
                    log.info("session expired after being idle")
                    self.end(entry.id)

    async def _run(
        self,
        session_id: str,
        initialize: Mapping[str, msgspec.Raw] | None,
        operator: str,
        *,
        task_status: anyio.abc.TaskStatus[HttpSession],
    ) -> None:
        self._running += 1
        try:
            await self._serve(session_id, initialize, operator, task_status)
        finally:
            self._running -= 1
            self._all_done.set()

    async def _connections(
        self, initialize: Mapping[str, msgspec.Raw] | None, operator: str
    ) -> tuple[list[UpstreamBase], list[UpstreamBase]]:
        """Every upstream connection of a new session, in order, and those of them it owns."""
        fleet = self._upstreams.fleet
        if self.shared is None or fleet is None or initialize is None:
            own = self._upstreams.make()
            return own, own
        params = {key: jsonrpc.decode_any(value) for key, value in initialize.items()}
        connections: list[UpstreamBase] = []
        own = []
        for spec in fleet.specs:
            # A Streamable HTTP upstream sends a server request on the stream of the call that
            # caused it; over stdio nothing says whose it is (upstream.shared).
            routes = spec.url is not None
            key = share_key(spec.name, params, operator=operator, attributes_requests=routes) if spec.share else None
            if key is None:
                own.append(fleet.connect_one(spec.name))
                connections.append(own[-1])
            else:
                connections.append(await self.shared.acquire(key, params))
        return connections, own

    async def _serve(
        self,
        session_id: str,
        initialize: Mapping[str, msgspec.Raw] | None,
        operator: str,
        task_status: anyio.abc.TaskStatus[HttpSession],
    ) -> None:
        connections, own = await self._connections(initialize, operator)
        for upstream in own:
            upstream.follow_client("legacy")  # its own connections speak its era where they can
        outbox = Outbox()
        peer = DownstreamPeer(outbox)
        try:
            async with run(own, lazy=self._upstreams.lazy) as running:
                session = Router(
                    connections,
                    peer,
                    running.task_group,
                    operator=operator,
                    transport="tcp",
                    session_id=session_id,
                    **self._upstreams.options,
                )
                entry = HttpSession(session_id, session, peer, outbox)
                self._sessions[session_id] = entry
                self._opening.discard(session_id)  # counted once: registered, no longer opening
                task_status.started(entry)
                await entry.ended.wait()
                with anyio.move_on_after(DRAIN_SECONDS):
                    await session.drain()
                peer.close()
                outbox.close()
        finally:
            with anyio.CancelScope(shield=True):
                for view in connections:
                    if isinstance(view, SharedView):
                        await view.shutdown()
