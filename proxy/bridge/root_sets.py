"""A connection per set of roots, for a session-era upstream that many 2026-07-28 clients share.

A session-era server holds one root list per connection (server-filesystem narrows its
directories to it), while the clients of one HTTP endpoint each grant their own, and a
2026-07-28 request names no client: there is no telling two clients apart but by what they
answer. So on a connection shared by many clients (the endpoint's stateless side) every call of
a client that declares `roots` first asks for them (the proxy's own `input_required` round), and
goes on a connection of its own for that root set (and for the capabilities it declared), opened
for the first call that brings it and initialized declaring them; that connection answers every
`roots/list` with exactly those roots, and the call goes up once it holds them. The link's own
connection, which serves the rest (lists, discovery, clients that declare no roots), holds no
client's roots: it is answered an empty list.

    RootSets(name, connect, ...)   the connections of one upstream, by root set: at most
                                   `limit`, each closed `idle` seconds after its last call ended;
                                   at the limit the least recently used idle one is closed for a
                                   new set, and with none idle the call fails (never served on a
                                   connection holding other roots)
    key_of(roots, declared)        what a connection is shared by: the same roots (in any order)
                                   and the same declared capabilities
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from frugal_proxy.bridge.mrtr import Carrier, Question
from frugal_proxy.bridge.roots import GrantedRoots, roots_of
from frugal_proxy.errors import BridgeError, UpstreamDown
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import PROXY_CLIENT_INFO, UpstreamBase
from frugal_proxy.upstream.fleet import run

log = logging.getLogger("frugal_proxy.bridge")

DEFAULT_LIMIT = 16  # connections (processes, for a stdio upstream) per upstream: `limits.root_sets`
DEFAULT_IDLE_SECONDS = 60.0

Attach = Callable[[Frame, UpstreamBase], Awaitable[None]]
Notify = Callable[[UpstreamBase, Frame], Awaitable[None]]


def key_of(roots: list[Any], declared: dict[str, Any]) -> str:
    """A digest of a root set (order and duplicates aside) and of the capabilities declared."""
    canonical = sorted({msgspec.json.encode(root, order="sorted") for root in roots})
    body = msgspec.json.encode({"roots": [msgspec.Raw(item) for item in canonical], "declared": declared})
    return hashlib.sha256(body).hexdigest()[:24]


@dataclass(eq=False)
class _Rooted:
    """One connection and the roots it holds."""

    key: str
    connection: UpstreamBase
    roots: GrantedRoots
    granted: list[Any]
    declared: dict[str, Any]
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # one initialize at a time
    started: bool = False  # its task (running the connection) has been started
    ready: bool = False  # initialized, and its roots handed over
    calls: int = 0  # calls going on it now
    uses: int = 0  # calls it has been given (an idle close goes ahead only if none came since)
    closed: anyio.Event = field(default_factory=anyio.Event)


class RootSets:
    """The connections of one session-era upstream, one per root set its clients granted."""

    def __init__(
        self,
        name: str,
        connect: Callable[[], UpstreamBase],
        task_group: anyio.abc.TaskGroup,
        *,
        attach: Attach,
        notify: Notify,
        limit: int = DEFAULT_LIMIT,
        idle: float = DEFAULT_IDLE_SECONDS,
    ) -> None:
        self.name = name
        self._connect = connect
        self._tg = task_group
        self._attach = attach
        self._notify = notify
        self.limit = limit
        self.idle = idle
        self._entries: OrderedDict[str, _Rooted] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._entries)

    def question(self, declared: dict[str, Any]) -> Question:
        """The proxy's own roots/list for a call of a client that declared `declared` (bridged
        capabilities, roots among them): its answer picks the connection the call goes on."""

        async def answered(reply: Frame) -> Carrier:
            roots = roots_of(reply)
            if roots is None:
                log.warning(
                    "the client gave no roots; its call goes on a connection holding none",
                    extra={"upstream": self.name},
                )
            return await self.acquire(roots if roots is not None else [], declared)

        return Question("roots/list", {}, answered, binding=True)

    async def acquire(self, roots: list[Any], declared: dict[str, Any]) -> Carrier:
        """The connection holding `roots` (opened and initialized for them when new), counted
        busy until the carrier is released."""
        key = key_of(roots, declared)
        entry = self._entries.get(key)
        if entry is None:
            self._make_room()
            connection = self._connect()
            connection.follow_client("legacy")  # the link's own connection found it session-era
            entry = _Rooted(key, connection, GrantedRoots(connection), roots, declared)
            self._wire(entry)
            self._entries[key] = entry
        self._entries.move_to_end(key)
        # Counted busy before any await: a concurrent acquire at the limit must not take a
        # connection still being opened for its idle one and close it.
        entry.calls += 1
        entry.uses += 1
        try:
            if not entry.started:
                entry.started = True
                await self._tg.start(self._own, entry)
            async with entry.lock:
                if entry.closed.is_set():
                    raise BridgeError(
                        f"upstream {self.name!r}: the connection for the client's roots could not be opened;"
                        " retry the call",
                        jsonrpc.INTERNAL_ERROR,
                    )
                if not entry.ready:
                    await self._prepare(entry)
                    entry.ready = True
        except BaseException:
            self._release(entry)
            raise
        return Carrier(entry.connection, lambda: self._release(entry))

    # -- internals ----------------------------------------------------------------------------------

    def _wire(self, entry: _Rooted) -> None:
        connection = entry.connection

        async def on_request(upstream: UpstreamBase, frame: Frame) -> None:
            method = jsonrpc.method_of(frame)
            if method == "ping":
                await upstream.send_reply(jsonrpc.result(jsonrpc.id_of(frame), {}))
            elif method == "roots/list":
                await entry.roots.answer(frame)  # its own roots, whenever asked: never others'
            else:
                await self._attach(frame, upstream)

        connection.on_server_request = on_request
        connection.on_notification = self._notify

    async def _own(self, entry: _Rooted, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            async with run([entry.connection], log_failures=False):
                task_status.started()
                await entry.closed.wait()
        finally:
            if self._entries.get(entry.key) is entry:
                del self._entries[entry.key]

    async def _prepare(self, entry: _Rooted) -> None:
        """Initialize the connection declaring what its clients declared, and hand it their
        roots before any call goes on it."""
        connection = entry.connection
        entry.roots.known = entry.granted
        entry.roots.started()
        params = {
            "protocolVersion": eras.LATEST_HANDSHAKE,
            "capabilities": entry.declared,
            "clientInfo": PROXY_CLIENT_INFO,
        }
        try:
            reply = await connection.initialize(params)
        except UpstreamDown:
            self._close(entry)
            raise
        problem = jsonrpc.error_of(reply)
        if problem is not None:
            self._close(entry)
            raise BridgeError(
                f"upstream {self.name!r} refused the initialize of a connection for the client's roots: {problem[1]}",
                jsonrpc.INTERNAL_ERROR,
            )
        await entry.roots.take(entry.granted)
        log.info(
            "upstream connection opened for a set of client roots",
            extra={"upstream": self.name, "root_sets": len(self._entries)},
        )

    def _make_room(self) -> None:
        """At the limit, close the least recently used idle connection; with none idle, refuse."""
        if len(self._entries) < self.limit:
            return
        idle = next((entry for entry in self._entries.values() if entry.calls == 0), None)
        if idle is None:
            log.warning(
                "every connection for a set of client roots is busy; call refused",
                extra={"upstream": self.name, "limit": self.limit},
            )
            raise BridgeError(
                f"upstream {self.name!r} already has {self.limit} connections, one for each set of client roots"
                " it serves, and each has a call under way; the proxy never serves a call on a connection that"
                " holds other roots, so retry once a call has ended (or serve fewer distinct root sets)",
                jsonrpc.INTERNAL_ERROR,
            )
        self._close(idle)

    def _release(self, entry: _Rooted) -> None:
        entry.calls -= 1
        if entry.calls == 0:
            self._tg.start_soon(self._close_when_idle, entry, entry.uses)

    async def _close_when_idle(self, entry: _Rooted, mark: int) -> None:
        with anyio.move_on_after(self.idle):
            await entry.closed.wait()
        if entry.calls == 0 and entry.uses == mark:
            self._close(entry)

    def _close(self, entry: _Rooted) -> None:
        if self._entries.get(entry.key) is entry:
            del self._entries[entry.key]
        entry.closed.set()
