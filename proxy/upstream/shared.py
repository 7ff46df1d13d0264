"""Upstream connections that several session-era HTTP sessions share.

    share_key(name, params, operator=, attributes_requests=)
                              the key a session's initialize shares under (never across
                              operators), or None when it must have a connection of its own
    SharedUpstreams           one connection per key, counted by the sessions that hold it and
                              closed a grace period after the last one leaves
    SharedView                one session's face of a shared connection: what its link sees as
                              its upstream

A shared connection is initialized once, with the key's protocol version and capabilities and
the proxy's clientInfo; every later session's initialize is answered from that reply. Replies,
progress and cancellations follow the connection's own id and token maps. Of what the upstream
sends unasked: list_changed goes to every session on it; `resources/updated` to the sessions
subscribed to that URI (the upstream subscription is counted: the first subscribe sends it, the
last unsubscribe, or the last subscriber leaving, ends it); `notifications/message` to each
session at or above the level it set (the upstream is set to the most verbose of them; a session
that set none gets what the upstream sends); `ping` is answered.

Server requests. `sampling/createMessage` and `elicitation/create` go to the session whose call
caused them. Only a Streamable HTTP upstream says which call that is: it sends the request on
that call's response stream, which the calling session's own task reads (so the task that is
delivering the request names the session). A stdio server's request carries nothing that names
its call, so sessions that declare sampling or elicitation share only an HTTP upstream; `roots`
are never shared (a server asks for them outside any call, after `initialized` or a
`roots/list_changed`, and holds one list per connection while each session has its own). A
request no session's call delivered, or one whose capability the sessions did not declare, gets
the error a client without it answers. A URL-mode elicitation's
`notifications/elicitation/complete` goes to the session that was asked (by `elicitationId`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import anyio
import anyio.abc
import msgspec

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import (
    PROXY_CLIENT_INFO,
    CutHandler,
    Era,
    Pending,
    ProgressHandler,
    RelatedHandler,
    UpstreamBase,
)
from frugal_proxy.upstream.fleet import run

log = logging.getLogger("frugal_proxy.shared")

DEFAULT_GRACE_SECONDS = 5.0
RELEASE_SECONDS = 5.0  # how long a leaving session's unsubscribes and level change may take
# What a client may declare that lets the upstream ask it things, by the method that asks.
ASKED_BY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation", "roots/list": "roots"}
# Of them, what sessions on one connection can share: the ones asked only within a call.
ASKED_IN_CALLS = frozenset({"sampling", "elicitation"})


class ShareKey(NamedTuple):
    """What sessions must have in common to share a connection."""

    upstream: str
    operator: str
    protocol_version: str
    capabilities_digest: str


def share_key(
    name: str, params: Mapping[str, Any], *, operator: str, attributes_requests: bool = False
) -> ShareKey | None:
    """The key under which a session-era client's initialize (decoded params) shares upstream
    `name`: the upstream, the operator whose token opened the session (an upstream's own state,
    such as the notes a server keeps per connection, never crosses from one operator to
    another), the protocol version it asks for and a digest of the capabilities it declares.
    None when the upstream could ask the session something no shared connection can route:
    roots, or sampling and elicitation unless the upstream `attributes_requests` (sends each on
    the stream of the call that caused it, as Streamable HTTP does)."""
    version = params.get("protocolVersion")
    capabilities = params.get("capabilities")
    if not isinstance(version, str):
        return None
    declared = capabilities if isinstance(capabilities, dict) else {}
    asked = declared.keys() & set(ASKED_BY.values())
    if asked and not (attributes_requests and asked <= ASKED_IN_CALLS):
        return None
    digest = hashlib.sha256(msgspec.json.encode(declared, order="sorted")).hexdigest()[:16]
    return ShareKey(name, operator, version, digest)


def _level_rank(level: Any) -> int:
    return eras.LOG_LEVELS.index(level) if level in eras.LOG_LEVELS else 0


@dataclass(eq=False)
class _Shared:
    """One connection and the sessions on it."""

    key: ShareKey
    connection: UpstreamBase
    params: dict[str, Any]
    views: set[SharedView] = field(default_factory=set)
    entered: anyio.Event = field(default_factory=anyio.Event)  # its task runs it (it may start)
    closed: anyio.Event = field(default_factory=anyio.Event)
    init_lock: anyio.Lock = field(default_factory=anyio.Lock)
    init_reply: Frame | None = None
    subscriptions: dict[str, _Subscription] = field(default_factory=dict)
    level: str | None = None  # what the upstream was last set to
    # Bumped whenever a session joins or the last one leaves: a close scheduled when it was
    # left idle goes ahead only if nothing has changed since.
    epoch: int = 0
    # The sessions whose calls are under way, by the task that carries each: a server request
    # delivered in one of these tasks was caused by that session's call.
    callers: dict[int, SharedView] = field(default_factory=dict)
    # URL-mode elicitations by id, to the session asked: their `notifications/elicitation/complete`
    # is that session's alone.
    elicitations: dict[str, SharedView] = field(default_factory=dict)
    asks: bool = field(init=False, default=False)  # its sessions declared sampling or elicitation

    def __post_init__(self) -> None:
        self.asks = any(self.declares(capability) for capability in ASKED_IN_CALLS)

    def declares(self, capability: str) -> bool:
        """Whether the sessions on it (they all declare the same) declared `capability`."""
        declared = self.params.get("capabilities")
        return isinstance(declared, dict) and capability in declared


@dataclass(eq=False)
class _Subscription:
    """One URI's upstream subscription and the sessions that hold it."""

    holders: set[SharedView] = field(default_factory=set)
    active: bool = False  # the upstream accepted it (and has not been told to end it)
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # one upstream subscribe or unsubscribe at a time
    attempts: int = 0  # upstream subscribes sent
    refusal: Frame | None = None  # the upstream's answer to the last of them, when it refused


class SharedUpstreams:
    """Every shared connection of an endpoint, by key."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        connect: Callable[[str], UpstreamBase],
        *,
        lazy: frozenset[str] = frozenset(),
        grace: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        self._tg = task_group
        self._connect = connect
        self._lazy = lazy
        self.grace = grace
        self._by_key: dict[ShareKey, _Shared] = {}
        self._stopped = anyio.Event()  # close_all: no grace period is waited out any more

    def __len__(self) -> int:
        return len(self._by_key)

    async def acquire(self, key: ShareKey, params: Mapping[str, Any]) -> SharedView:
        """A view of the connection for `key` (started in the background if new)."""
        shared = self._by_key.get(key)
        if shared is None:
            connection = self._connect(key.upstream)
            connection.follow_client("legacy")
            initialize = {
                "protocolVersion": key.protocol_version,
                "capabilities": params.get("capabilities") or {},
                "clientInfo": PROXY_CLIENT_INFO,
            }
            shared = _Shared(key, connection, initialize)
            self._by_key[key] = shared
            connection.on_server_request = lambda up, frame: self._server_request(shared, up, frame)
            connection.on_notification = lambda _up, frame: self._notification(shared, frame)
            await self._tg.start(self._own, shared)
        await shared.entered.wait()  # a second session asking while the first one's task starts
        view = SharedView(shared, self)
        shared.views.add(view)
        shared.epoch += 1
        return view

    async def release(self, view: SharedView) -> None:
        """The session of `view` left: its subscriptions and level go; the connection closes a
        grace period after its last session left."""
        shared = view.shared
        if view not in shared.views:
            return
        shared.views.discard(view)
        for elicitation in [key for key, asked in shared.elicitations.items() if asked is view]:
            del shared.elicitations[elicitation]
        with anyio.move_on_after(RELEASE_SECONDS):  # a hung upstream must not hold the session's end
            for uri in list(view.uris):
                await view.unsubscribe(uri)
            await self._set_level(shared)
        if not shared.views:
            shared.epoch += 1
            self._tg.start_soon(self._close_later, shared, shared.epoch)

    def close_all(self) -> None:
        """Close every shared connection now (at shutdown, once their sessions have ended)."""
        self._stopped.set()
        for shared in list(self._by_key.values()):
            shared.closed.set()
        self._by_key.clear()

    async def _close_later(self, shared: _Shared, mark: int) -> None:
        with anyio.move_on_after(self.grace):
            await self._stopped.wait()
        if shared.views or shared.epoch != mark:
            return
        if self._by_key.get(shared.key) is shared:
            del self._by_key[shared.key]
        shared.closed.set()

    async def _own(self, shared: _Shared, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        lazy = {shared.key.upstream} & self._lazy
        async with run([shared.connection], lazy=lazy):
            shared.entered.set()
            task_status.started()
            await shared.closed.wait()
        if self._by_key.get(shared.key) is shared:
            del self._by_key[shared.key]

    # -- what the upstream sends unasked ------------------------------------------------------------

    @staticmethod
    async def _server_request(shared: _Shared, upstream: UpstreamBase, frame: Frame) -> None:
        method = jsonrpc.method_of(frame) or ""
        ident = jsonrpc.id_of(frame)
        if method == "ping":
            await upstream.send_reply(jsonrpc.result(ident, {}))
            return
        capability = ASKED_BY.get(method)
        if capability is None or not shared.declares(capability):
            message = f"{method} not supported: the client declared no capability for it"
            await upstream.send_reply(jsonrpc.error(ident, jsonrpc.METHOD_NOT_FOUND, message))
            return
        view = shared.callers.get(_task_id())
        if view is None or view.on_server_request is None:
            log.warning(
                "server request outside any session's call on a shared connection; refused",
                extra={"upstream": shared.key.upstream, "method": method},
            )
            message = (
                f"{method} refused: upstream {shared.key.upstream!r} is shared by several sessions and sent it"
                " outside any of their calls, so the proxy cannot tell whose it is; send it within the call"
                f" it belongs to, or set upstreams.{shared.key.upstream}.share = false"
            )
            await upstream.send_reply(jsonrpc.error(ident, jsonrpc.METHOD_NOT_FOUND, message))
            return
        if method == "elicitation/create":
            elicitation = jsonrpc.decode_any(jsonrpc.params_of(frame).get("elicitationId", msgspec.Raw(b"null")))
            if isinstance(elicitation, str):
                shared.elicitations[elicitation] = view
        await view.on_server_request(view, frame)

    async def _notification(self, shared: _Shared, frame: Frame) -> None:
        method = jsonrpc.method_of(frame)
        views: list[SharedView]
        if method == "notifications/resources/updated":
            uri = jsonrpc.decode_any(jsonrpc.params_of(frame).get("uri", msgspec.Raw(b"null")))
            held = shared.subscriptions.get(uri) if isinstance(uri, str) else None
            views = list(held.holders) if held is not None else []
        elif method == "notifications/elicitation/complete":
            elicitation = jsonrpc.decode_any(jsonrpc.params_of(frame).get("elicitationId", msgspec.Raw(b"null")))
            asked = shared.elicitations.pop(elicitation, None) if isinstance(elicitation, str) else None
            views = [asked] if asked is not None and asked in shared.views else []
        elif method == "notifications/message":
            level = _level_rank(jsonrpc.decode_any(jsonrpc.params_of(frame).get("level", msgspec.Raw(b"null"))))
            views = [view for view in shared.views if view.level is None or level >= _level_rank(view.level)]
        else:
            views = list(shared.views)
        for view in views:
            if view.on_notification is not None:
                await view.on_notification(view, frame)

    async def _set_level(self, shared: _Shared) -> Frame | None:
        """Set the upstream to the most verbose level any of its sessions asked for (when that
        changed); its reply, or None when nothing was sent."""
        levels = [view.level for view in shared.views if view.level is not None]
        wanted = min(levels, key=_level_rank) if levels else None
        if wanted is None or wanted == shared.level or not shared.connection.running:
            return None
        shared.level = wanted
        return await shared.connection.request("logging/setLevel", {"level": wanted})


def _task_id() -> int:
    return anyio.get_current_task().id


class SharedView(UpstreamBase):
    """One session's side of a shared connection; everything else is the connection's."""

    def __init__(self, shared: _Shared, pool: SharedUpstreams) -> None:
        # The base's state is the connection's: it is read through the properties below.
        self.shared = shared
        self._pool = pool
        self.name = shared.connection.name
        self.probe_timeout = shared.connection.probe_timeout
        self.on_server_request = None
        self.on_notification = None
        self.uris: set[str] = set()
        self.level: str | None = None
        self._joined = False

    @property
    def _connection(self) -> UpstreamBase:
        return self.shared.connection

    @property
    def era(self) -> Era | None:
        return self._connection.era

    @era.setter
    def era(self, value: Era | None) -> None:
        self._connection.era = value

    @property
    def discover_result(self) -> dict[str, Any] | None:
        return self._connection.discover_result

    @discover_result.setter
    def discover_result(self, value: dict[str, Any] | None) -> None:
        self._connection.discover_result = value

    @property
    def initialize_result(self) -> dict[str, Any] | None:
        return self._connection.initialize_result

    @initialize_result.setter
    def initialize_result(self, value: dict[str, Any] | None) -> None:
        self._connection.initialize_result = value

    @property
    def initialize_params(self) -> Any:
        """The shared params once this session has initialized through them (before: None)."""
        return self.shared.params if self._joined else None

    @initialize_params.setter
    def initialize_params(self, value: Any) -> None:
        # A view never takes params of its own; the link clears them when an initialize through
        # it was refused, and then this session has not joined.
        if value is None:
            self._joined = False

    @property
    def generation(self) -> int:
        return self._connection.generation

    @generation.setter
    def generation(self, value: int) -> None:
        self._connection.generation = value

    @property
    def running(self) -> bool:
        return self._connection.running

    @property
    def session_open(self) -> bool:
        return self._connection.session_open

    @property
    def modern(self) -> bool:
        return self._connection.modern

    def follow_client(self, era: Era | None = None) -> None:
        """A shared connection always follows its session-era clients."""

    def client_speaks(self, era: Era | None) -> None:
        self._connection.client_speaks(era)

    async def ensure_ready(self) -> None:
        await self._connection.ensure_ready()

    async def started_or_down(self) -> Any:
        return await self._connection.started_or_down()

    async def answers(self, within: float, *, quiet: bool = False) -> bool:
        return await self._connection.answers(within, quiet=quiet)

    async def _start(self) -> None:
        await self._connection.ensure_ready()

    async def initialize(self, params: Any) -> Frame:
        """Initialize the shared connection with the key's params, once; every session gets
        that reply (a refusal is not kept: the next session tries again)."""
        shared = self.shared
        async with shared.init_lock:
            if shared.init_reply is None or not self._connection.session_open:
                reply = await self._connection.initialize(shared.params)
                if "result" not in reply:
                    return reply
                shared.init_reply = reply
            self._joined = True
            return dict(shared.init_reply)

    async def reinitialize(self, params: Any) -> Frame:
        """Widening a shared connection would change what its other sessions declared: refused."""
        message = "this upstream connection is shared by session-era sessions; it is not initialized again"
        return jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message)

    @property
    def settled(self) -> bool:
        return self._connection.settled

    def start_request(
        self,
        method: str,
        params: Any,
        on_settled: Callable[[Pending], Coroutine[Any, Any, None]],
        *,
        on_progress: ProgressHandler | None = None,
    ) -> Pending | None:
        """The connection's own, for a call (a plain tools/call) whose session nothing can ask
        (with sampling or elicitation declared, `request` names the calling session first)."""
        if self.shared.asks or method != "tools/call":
            return None
        return self._connection.start_request(method, params, on_settled, on_progress=on_progress)

    async def withdraw(self, pending: Pending, reason: str) -> None:
        await self._connection.withdraw(pending, reason)

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_progress: ProgressHandler | None = None,
        on_related: RelatedHandler | None = None,
        headers: Mapping[str, str] | None = None,
        on_cut: CutHandler | None = None,
    ) -> Frame:
        if method in ("resources/subscribe", "resources/unsubscribe") and isinstance(params, dict):
            uri = params.get("uri")
            uri = jsonrpc.decode_any(uri) if isinstance(uri, msgspec.Raw) else uri
            if isinstance(uri, str):
                if method == "resources/subscribe":
                    return await self.subscribe(uri, params)
                return await self.unsubscribe(uri, params)
        if method == "logging/setLevel" and isinstance(params, dict):
            level = params.get("level")
            level = jsonrpc.decode_any(level) if isinstance(level, msgspec.Raw) else level
            if level in eras.LOG_LEVELS:
                self.level = level
                reply = await self._pool._set_level(self.shared)
                return reply if reply is not None and "result" not in reply else jsonrpc.result(None, {})
        if not self.shared.asks:
            return await self._connection.request(
                method, params, on_progress=on_progress, on_related=on_related, headers=headers, on_cut=on_cut
            )
        task = _task_id()
        outer = self.shared.callers.get(task)
        self.shared.callers[task] = self  # what the upstream asks while this task reads the reply is this session's
        try:
            return await self._connection.request(
                method, params, on_progress=on_progress, on_related=on_related, headers=headers, on_cut=on_cut
            )
        finally:
            if outer is None:
                self.shared.callers.pop(task, None)
            else:
                self.shared.callers[task] = outer

    async def subscribe(self, uri: str, params: Any) -> Frame:
        """Hold `uri`'s subscription: the upstream is asked once, when its first session
        subscribes; sessions that subscribe while that is under way wait for its answer, a
        refusal included."""
        subscription = self.shared.subscriptions.setdefault(uri, _Subscription())
        if self in subscription.holders:
            return jsonrpc.result(None, {})
        seen = subscription.attempts
        try:
            async with subscription.lock:
                if not subscription.active:
                    if subscription.attempts != seen and subscription.refusal is not None:
                        return dict(subscription.refusal)  # refused while this one waited for it
                    if self not in self.shared.views:
                        return jsonrpc.result(None, {})  # its session ended while it waited
                    subscription.attempts, subscription.refusal = subscription.attempts + 1, None
                    reply = await self._connection.request("resources/subscribe", params)
                    if "result" not in reply:
                        subscription.refusal = reply
                        return reply
                    subscription.active = True
                if self not in self.shared.views:  # its session ended meanwhile: it holds nothing
                    if not subscription.holders:
                        await self._end_upstream(subscription, uri)
                    return jsonrpc.result(None, {})
                subscription.holders.add(self)
                self.uris.add(uri)
        finally:
            self._tidy(uri, subscription)
        return jsonrpc.result(None, {})

    async def unsubscribe(self, uri: str, params: Any = None) -> Frame:
        """Let go of `uri`: the last holder leaving ends the upstream subscription. A session
        that holds none is answered by the upstream when nobody else does either."""
        self.uris.discard(uri)
        subscription = self.shared.subscriptions.get(uri)
        if subscription is not None and self not in subscription.holders and subscription.holders:
            return jsonrpc.result(None, {})  # others hold it: this session's unsubscribe ends nothing
        if subscription is None:  # nobody subscribed through the proxy: the upstream's own answer
            if not self._connection.running:
                return jsonrpc.result(None, {})
            return await self._connection.request("resources/unsubscribe", params or {"uri": uri})
        try:
            async with subscription.lock:
                subscription.holders.discard(self)
                if subscription.holders or not subscription.active:
                    return jsonrpc.result(None, {})
                return await self._end_upstream(subscription, uri, params)
        finally:
            self._tidy(uri, subscription)

    async def _end_upstream(self, subscription: _Subscription, uri: str, params: Any = None) -> Frame:
        """End the upstream subscription nobody holds any more (with its lock held)."""
        subscription.active = False
        if not self._connection.running:
            return jsonrpc.result(None, {})
        return await self._connection.request("resources/unsubscribe", params or {"uri": uri})

    def _tidy(self, uri: str, subscription: _Subscription) -> None:
        """Forget a subscription nobody holds or waits for."""
        idle = not subscription.holders and not subscription.active and not subscription.lock.locked()
        if idle and self.shared.subscriptions.get(uri) is subscription:
            del self.shared.subscriptions[uri]

    async def notify(self, method: str, params: Any = None) -> None:
        await self._connection.notify(method, params)

    async def send_reply(self, frame: Frame) -> None:
        await self._connection.send_reply(frame)

    async def shutdown(self) -> None:
        await self._pool.release(self)

    def state(self) -> dict[str, object]:
        return {**self._connection.state(), "shared_by": len(self.shared.views)}
