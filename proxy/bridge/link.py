"""One upstream as one client's session sees it: the era translation between the two.

The client is in the session era once it sends `initialize`, and is served statelessly whenever
a request names a 2026-07-28 version in `params._meta`. The upstream's era is what the probe
found, or, for a connection that serves this client alone, the client's own where the upstream
speaks it (UpstreamBase.follow_client: a dual-era upstream is initialized with the client's
params). Four cases follow:

    client \\ upstream   2026-07-28                         session era
    2026-07-28          forwarded as they are              the proxy initializes the upstream with
                                                           what the client declared (of what it
                                                           can bridge), again when a request
                                                           declares more; server requests become
                                                           input_required (MRTR)
    session era         the proxy answers initialize,      initialize passes through, so the
                        ping, logging/setLevel; stamps     upstream sees the client's real
                        _meta; input_required becomes      capabilities; everything forwarded
                        server requests to the client;
                        results lose the fields only
                        2026-07-28 defines (resultType,
                        ttlMs, cacheScope, serverInfo)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
import msgspec

from frugal_proxy import tracing
from frugal_proxy.bridge.downstream import ClientGone, DownstreamPeer
from frugal_proxy.bridge.listen_hub import ListenHub
from frugal_proxy.bridge.mrtr import HeldCalls, Question, fulfil_input_required
from frugal_proxy.bridge.root_sets import DEFAULT_LIMIT as DEFAULT_ROOT_SETS
from frugal_proxy.bridge.root_sets import RootSets
from frugal_proxy.bridge.roots import GrantedRoots
from frugal_proxy.errors import BridgeError, UpstreamDown, UpstreamTimeout
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId
from frugal_proxy.protocol.subscriptions import filter_for_legacy, tag
from frugal_proxy.records import ProgressSink, StreamCut
from frugal_proxy.upstream.base import PROXY_CLIENT_INFO, Pending, UpstreamBase

log = logging.getLogger("frugal_proxy.link")

LIST_CHANGED = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
# A listen filter's change kinds, and the capability section whose `listChanged` each answers for.
LISTEN_KINDS = {"toolsListChanged": "tools", "promptsListChanged": "prompts", "resourcesListChanged": "resources"}
LEGACY_ACK_WAIT = 2.0  # how long a session-era client's initialize waits for the listen stream's acknowledgement
ChangeHandler = Callable[["UpstreamLink", Frame], Awaitable[None]]


@dataclass
class Client:
    """What the proxy knows of the client a request came from."""

    era: Literal["modern", "legacy"] | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    client_info: dict[str, Any] | None = None
    protocol_version: str | None = None
    log_level: str | None = None

    @property
    def modern(self) -> bool:
        return self.era == "modern"


class UpstreamLink:
    """Bridges one client (its state shared by all links of a session) to one upstream."""

    def __init__(
        self,
        upstream: UpstreamBase,
        client: Client,
        downstream: DownstreamPeer,
        task_group: anyio.abc.TaskGroup,
        *,
        on_change: ChangeHandler | None = None,
        deadline: float | None = None,
        connect: Callable[[], UpstreamBase] | None = None,
        root_sets: int = DEFAULT_ROOT_SETS,
    ) -> None:
        """`connect` makes a fresh connection to the same upstream: given where many clients
        share this link (the HTTP endpoint's stateless side), a 2026-07-28 client's roots are
        kept on a connection per root set (at most `root_sets`; bridge.root_sets), never on the
        link's own."""
        self.upstream = upstream
        self.name = upstream.name
        self.deadline = deadline  # seconds a request may wait for this upstream (None: no limit)
        self.client = client
        self.downstream = downstream
        self._tg = task_group
        self._on_change = on_change
        self.held = HeldCalls(upstream, task_group, on_answer=self._client_answered)
        self.roots = GrantedRoots(upstream)
        self.root_sets = (
            RootSets(
                upstream.name,
                connect,
                task_group,
                attach=self.held.attach,
                notify=self.on_upstream_notification,
                limit=root_sets,
            )
            if connect is not None
            else None
        )
        self.hub = ListenHub(downstream.send, self._subscribe_upstream, self._unsubscribe_upstream)
        self._init_lock = anyio.Lock()
        self._declared: dict[str, Any] | None = None  # what the proxy's own initialize declared
        self._covered_for: dict[str, Any] | None = None  # the last client declaration it covered
        self._legacy_uris: set[str] = set()
        self._legacy_listen: anyio.CancelScope | None = None
        self._legacy_heard = anyio.Event()  # the legacy client's listen stream was acknowledged or refused
        self._legacy_honoured: dict[str, Any] | None = None  # what that acknowledgement accepted
        self._resubscribing = False
        upstream.on_server_request = self.on_server_request
        upstream.on_notification = self.on_upstream_notification
        upstream.on_burst = downstream.hold

    # -- forwarding ------------------------------------------------------------------------------

    async def forward(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        on_progress: ProgressSink | None,
        headers: Mapping[str, str] | None = None,
        *,
        on_cut: StreamCut | None = None,
    ) -> Frame:
        """Send a request upstream in the upstream's era and bring the answer back in the client's.
        `headers` go on with it where the upstream's transport carries them; `on_cut` is told when
        a session-era HTTP upstream closes the request's stream before its reply (the connection
        resumes it). Past the link's `deadline` the request is cancelled upstream and
        UpstreamTimeout names the knob. Traced, it is a CLIENT span whose context goes upstream
        in `params._meta`."""
        with tracing.client_span(method, params, self.upstream) as span:  # (a no-op while tracing is off)
            if span is not None:
                params = tracing.with_trace_context(params)
            if self.deadline is None:
                reply = await self._forward(method, params, client, on_progress, headers, on_cut)
            else:
                try:
                    with anyio.fail_after(self.deadline):
                        reply = await self._forward(method, params, client, on_progress, headers, on_cut)
                except TimeoutError:
                    raise self.timed_out(method) from None
            tracing.note_reply(span, reply, method)
            return reply

    def timed_out(self, method: str) -> UpstreamTimeout:
        """The error of a request that ran past the link's deadline (and was cancelled upstream)."""
        log.warning("upstream request timed out", extra={"upstream": self.name, "method": method})
        return UpstreamTimeout(
            f"upstream {self.name!r} did not answer within {self.deadline:g} s (the deadline of its "
            f"{method}: upstreams.{self.name}.timeout, else limits.call_timeout); "
            "the call was cancelled upstream"
        )

    def passes_through(self, client: Client) -> bool:
        """Whether `forward` would send a request of `client` on as it is, with nothing to start,
        negotiate, initialize or translate first: the upstream settled, and in the session era
        with its session open behind a session-era client, or in 2026-07-28 behind a client that
        speaks it. Such a request may be started without a task (`start`)."""
        upstream = self.upstream
        if not upstream.settled:
            return False
        if client.modern:
            return upstream.era == "modern"
        return upstream.era == "legacy" and upstream.session_open

    def start(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        on_settled: Callable[[Pending], Coroutine[Any, Any, None]],
        on_progress: ProgressSink | None,
    ) -> Pending | None:
        """Send a request that `passes_through` at once, without a task waiting for its reply
        (UpstreamBase.start_request); None, with nothing sent, when it cannot go out at once.
        The link's deadline is the caller's to keep."""
        return self.upstream.start_request(method, params, on_settled, on_progress=on_progress)

    async def _forward(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        on_progress: ProgressSink | None,
        headers: Mapping[str, str] | None,
        on_cut: StreamCut | None = None,
    ) -> Frame:
        assert isinstance(client, Client)
        upstream = self.upstream
        await self._ready(client)
        if upstream.era == "legacy":
            await self.ensure_initialized(client)
        if upstream.modern:
            out = params if client.modern else eras.add_modern_meta(params, self.stamp())
            reply = await upstream.request(method, out, on_progress=on_progress, headers=headers)
            if client.modern:
                return reply
            if method in eras.INPUT_REQUIRED_METHODS:

                async def retry(next_params: dict[str, msgspec.Raw]) -> Frame:
                    return await upstream.request(method, next_params, on_progress=on_progress, headers=headers)

                reply = await fulfil_input_required(
                    reply, out, capabilities=self.client.capabilities, ask=self.downstream.request, retry=retry
                )
            return complete_for_legacy(reply)
        if not client.modern:
            return await upstream.request(method, params, on_progress=on_progress, on_cut=on_cut)
        out = eras.strip_modern_meta(params)
        if method in eras.INPUT_REQUIRED_METHODS:
            # Until the upstream holds the client's roots it may serve more than the client
            # granted: they are asked first, and the call goes up once the upstream has them.
            first = self._roots_question(client) if "requestState" not in out else None
            reply = await self.held.call(method, out, client.capabilities, on_progress, first=first)
        else:
            reply = await upstream.request(method, out, on_progress=on_progress)
        return complete_for_modern(method, reply)

    def _roots_question(self, client: Client) -> Question | None:
        """What a call of `client` asks first: its roots, unless it declared none (with many
        clients on this link, every call asks, and its answer picks the connection)."""
        if "roots" not in client.capabilities:
            return None
        if self.root_sets is not None:
            return self.root_sets.question(bridged_capabilities(client.capabilities))
        return self.roots.question()

    async def _ready(self, client: Client | None = None) -> None:
        """The upstream started and its era chosen; one that follows its client (it serves
        this one alone) learns the client's era first."""
        self.upstream.client_speaks((client or self.client).era)
        await self.upstream.ensure_ready()

    def stamp(self) -> dict[str, Any]:
        """The per-request `_meta` keys a session-era client's requests carry to a modern upstream."""
        stamp: dict[str, Any] = {
            eras.META_VERSION: eras.LATEST_MODERN,
            eras.META_CAPABILITIES: self.client.capabilities,
        }
        if self.client.client_info is not None:
            stamp[eras.META_CLIENT_INFO] = self.client.client_info
        if self.client.log_level is not None:
            stamp[eras.META_LOG_LEVEL] = self.client.log_level
        return stamp

    # -- handshakes --------------------------------------------------------------------------------

    async def initialize_for_client(self, params: dict[str, Any], passthrough: bool) -> Frame:
        """The upstream's answer to a session-era client's initialize.

        A session-era upstream that nobody has initialized yet gets the client's own params when
        `passthrough` is set (so it sees the client's real capabilities), else the proxy's.
        A modern upstream is described from its discover result.
        """
        upstream = self.upstream
        await self._ready()
        if upstream.era == "legacy":
            if passthrough:
                async with self._init_lock:
                    if upstream.initialize_params is None:
                        reply = await upstream.initialize(params)
                        if "result" in reply or upstream.era == "legacy":
                            return reply
                        upstream.initialize_params = None  # it turned out modern; describe it below
            else:
                await self.ensure_initialized()
        if upstream.era == "legacy":
            return jsonrpc.result(None, dict(upstream.initialize_result or {}))
        if self._legacy_listen is None:
            self._legacy_listen = anyio.CancelScope()
            self._tg.start_soon(self._listen_for_legacy_client)
        with anyio.move_on_after(LEGACY_ACK_WAIT):
            await self._legacy_heard.wait()  # the client is told of the changes the stream delivers
        discovered = upstream.discover_result or {}
        capabilities = capabilities_for_legacy(discovered.get("capabilities"))
        result: dict[str, Any] = {
            "protocolVersion": eras.negotiate_handshake(params.get("protocolVersion")),
            "capabilities": delivered_changes(capabilities, self._legacy_honoured),
            "serverInfo": server_info(discovered, upstream.name),
        }
        if discovered.get("instructions"):
            result["instructions"] = discovered["instructions"]
        return jsonrpc.result(None, result)

    async def ensure_initialized(self, client: Client | None = None) -> None:
        """A session-era upstream that no client initialized is initialized by the proxy,
        declaring what the (2026-07-28) client declared of what the proxy can bridge; when a
        later request declares more, the upstream is initialized again with the union, so
        that it never sees capabilities the client lacks nor misses ones it has."""
        upstream = self.upstream
        if upstream.era != "legacy":
            return
        declared_by = client.capabilities if client is not None and client.modern else None
        if upstream.session_open and self._covered(declared_by):
            return
        wanted = bridged_capabilities(declared_by) if declared_by is not None else {}
        # Not `initialize_params`: they are set as soon as an initialize is under way, and a
        # request sent before it is answered would reach a server with no session.
        async with self._init_lock:
            if upstream.era != "legacy":
                return
            if upstream.session_open and (self._declared is None or covers(self._declared, wanted)):
                return  # a client's own initialize (None: nothing to widen), or wide enough
            widening = upstream.session_open
            declared = widened(self._declared or {}, wanted)
            self.roots.started()
            params = {
                "protocolVersion": eras.LATEST_HANDSHAKE,
                "capabilities": declared,
                "clientInfo": PROXY_CLIENT_INFO,
            }
            if widening:
                log.info("the client declared more; initializing the upstream again", extra={"upstream": upstream.name})
            reply = await (upstream.reinitialize(params) if widening else upstream.initialize(params))
            problem = jsonrpc.error_of(reply)
            if problem is not None:
                upstream.initialize_params = None
                if upstream.modern:
                    return  # its late discover answer arrived first: it is served statelessly
                raise BridgeError(
                    f"upstream {upstream.name!r} refused initialize: {problem[1]}", jsonrpc.INTERNAL_ERROR
                )
            self._declared = declared
            self._covered_for = None

    def _covered(self, declared_by: dict[str, Any] | None) -> bool:
        """Whether the upstream's session covers what a client declared (None: a session-era
        client, whose own initialize it is). The last declaration found covered is kept, so that
        the requests of a client that declares the same each time cost one comparison here."""
        if declared_by is None or self._declared is None:
            return True
        if declared_by is self._covered_for or declared_by == self._covered_for:
            return True
        if not covers(self._declared, bridged_capabilities(declared_by)):
            return False
        self._covered_for = declared_by
        return True

    async def describe_for_modern(self, client: Client | None = None) -> dict[str, Any]:
        """This upstream's part of a `server/discover` result (for `client`, the request's)."""
        upstream = self.upstream
        await self._ready(client)
        if upstream.era == "legacy":
            # A probe that timed out may still be answered while the proxy initializes: then the
            # upstream is modern after all, and its discover result is what describes it.
            await self.ensure_initialized(client)
        if upstream.era == "modern":
            body = dict(upstream.discover_result or {})
            body["supportedVersions"] = list(eras.MODERN_VERSIONS)
            body.setdefault("resultType", "complete")
            body.setdefault("ttlMs", 0)
            body.setdefault("cacheScope", "private")
            return body
        initialized = upstream.initialize_result or {}
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(eras.MODERN_VERSIONS),
            "capabilities": capabilities_for_modern(initialized.get("capabilities")),
            "_meta": {eras.META_SERVER_INFO: server_info(initialized, upstream.name)},
            "ttlMs": 0,
            "cacheScope": "private",
        }
        if initialized.get("instructions"):
            result["instructions"] = initialized["instructions"]
        return result

    def capabilities(self) -> dict[str, Any]:
        """The upstream's capabilities as last negotiated ({} before it has started)."""
        if self.upstream.era == "modern":
            return dict((self.upstream.discover_result or {}).get("capabilities") or {})
        return dict((self.upstream.initialize_result or {}).get("capabilities") or {})

    # -- change notifications ----------------------------------------------------------------------

    async def listen(
        self,
        subscription_id: RequestId,
        requested: dict[str, Any],
        meta: dict[str, msgspec.Raw],
        *,
        task_status: anyio.abc.TaskStatus[dict[str, Any]] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """This upstream's part of a modern client's listen stream: reports the filter it
        honours through `task_status`, then relays notifications until cancelled."""
        upstream = self.upstream
        declared = jsonrpc.decode_any(meta[eras.META_CAPABILITIES]) if eras.META_CAPABILITIES in meta else {}
        client = Client("modern", declared if isinstance(declared, dict) else {})
        await self._ready(client)
        if upstream.era == "legacy":
            await self.ensure_initialized(client)
            await self.hub.listen(subscription_id, requested, self.capabilities(), task_status=task_status)
            return
        acknowledged = anyio.Event()
        honoured: dict[str, Any] = {}

        async def relay(frame: Frame) -> None:
            if jsonrpc.method_of(frame) == ACKNOWLEDGED:
                params = jsonrpc.decode_any(frame.get("params", msgspec.Raw(b"{}")))
                notifications = params.get("notifications") if isinstance(params, dict) else None
                honoured.update(notifications if isinstance(notifications, dict) else {})
                acknowledged.set()
                return
            await self._changed(frame)  # the cached lists first: the client lists again once told
            await self.downstream.send(tag(frame, subscription_id))

        params = {"notifications": jsonrpc.raw(requested), "_meta": jsonrpc.raw(meta)}
        async with anyio.create_task_group() as tg:

            async def stream() -> None:
                await upstream.request("subscriptions/listen", params, on_related=relay)
                acknowledged.set()

            tg.start_soon(stream)
            await acknowledged.wait()
            task_status.started(honoured)

    async def _listen_for_legacy_client(self) -> None:
        """Hold one upstream listen stream for a session-era client in front of a modern
        upstream, so that its changes reach the client as ordinary notifications."""
        assert self._legacy_listen is not None
        while True:
            with self._legacy_listen:
                try:
                    await self._ready()
                    # Every list the upstream has is asked for, whatever its listChanged flags say
                    # (servers set them by other rules): the acknowledgement says what it delivers.
                    wanted = filter_for_legacy(listenable(self.capabilities()), self._legacy_uris)
                    if not wanted:
                        self._legacy_heard.set()
                        return
                    params = {"notifications": wanted, "_meta": self.stamp()}
                    reply = await self.upstream.request("subscriptions/listen", params, on_related=self._relay_untagged)
                    problem = jsonrpc.error_of(reply)
                    if problem is not None:
                        log.info("upstream refused subscriptions/listen", extra={"reason": problem[1][:200]})
                        self._legacy_heard.set()  # its own flags stand
                        return
                except UpstreamDown as exc:
                    log.info("change stream lost; reopening", extra={"reason": str(exc)[:200]})
                await anyio.sleep(1.0)
            if self._legacy_listen.cancel_called and not self._resubscribing:
                return
            self._resubscribing = False
            self._legacy_listen = anyio.CancelScope()

    def stop_listening(self) -> None:
        if self._legacy_listen is not None:
            self._legacy_listen.cancel()

    async def _relay_untagged(self, frame: Frame) -> None:
        if jsonrpc.method_of(frame) == ACKNOWLEDGED:
            notifications = jsonrpc.sub_object(jsonrpc.params_of(frame), "notifications")
            self._legacy_honoured = {key: jsonrpc.decode_any(value) for key, value in notifications.items()}
            self._legacy_heard.set()
            return
        await self._changed(tag(frame, None))
        await self.downstream.send(tag(frame, None))

    async def legacy_subscribe(self, method: str, uri: str) -> Frame:
        """resources/subscribe or unsubscribe from a session-era client, on a modern upstream."""
        before = set(self._legacy_uris)
        if method == "resources/subscribe":
            self._legacy_uris.add(uri)
        else:
            self._legacy_uris.discard(uri)
        if self._legacy_uris != before:
            if self._legacy_listen is None:
                self._legacy_listen = anyio.CancelScope()
                self._tg.start_soon(self._listen_for_legacy_client)
            else:
                self._resubscribing = True
                self._legacy_listen.cancel()
        return jsonrpc.result(None, {})

    async def _subscribe_upstream(self, uri: str) -> None:
        reply = await self.upstream.request("resources/subscribe", {"uri": uri})
        problem = jsonrpc.error_of(reply)
        if problem is not None:
            raise BridgeError(f"upstream refused resources/subscribe for {uri}: {problem[1]}", problem[0])

    async def _unsubscribe_upstream(self, uri: str) -> None:
        if self.upstream.running:
            await self.upstream.request("resources/unsubscribe", {"uri": uri})

    async def _changed(self, frame: Frame) -> None:
        if self._on_change is not None and jsonrpc.method_of(frame) in LIST_CHANGED:
            await self._on_change(self, frame)

    # -- what the upstream sends unasked -------------------------------------------------------------

    async def on_server_request(self, upstream: UpstreamBase, frame: Frame) -> None:
        method = jsonrpc.method_of(frame)
        upstream_id = jsonrpc.id_of(frame)
        if method == "ping":
            await upstream.send_reply(jsonrpc.result(upstream_id, {}))
        elif method == "roots/list" and self.root_sets is not None:
            # Many clients share this connection (a session-era one without a session cannot be
            # asked at all): it holds none of their roots, never a wider list (fail closed).
            await self.roots.answer(frame)
        elif self.client.era == "legacy":
            self._tg.start_soon(self._relay_server_request, upstream, frame)
        elif method == "roots/list" and (self.roots.answers_here or not self.held.open):
            await self.roots.answer(frame)  # outside any call: never refused, never wider than granted
        else:
            await self.held.attach(frame)

    async def _client_answered(self, method: str, reply: Frame) -> None:
        if method == "roots/list":
            await self.roots.delivered(reply)

    async def _relay_server_request(self, upstream: UpstreamBase, frame: Frame) -> None:
        upstream_id = jsonrpc.id_of(frame)
        try:
            reply = await self.downstream.request(jsonrpc.method_of(frame) or "", frame.get("params"))
        except ClientGone as exc:
            reply = jsonrpc.error(upstream_id, jsonrpc.INTERNAL_ERROR, str(exc) or "the client went away")
        await upstream.send_reply(jsonrpc.with_id(reply, upstream_id))

    async def on_upstream_notification(self, upstream: UpstreamBase, frame: Frame) -> None:
        method = jsonrpc.method_of(frame) or ""
        await self._changed(frame)
        if self.client.modern:
            if method in LIST_CHANGED:
                await self.hub.publish(frame)  # to the listen streams that opted in, and no one else
                return
            if method == "notifications/message" and self.client.log_level is None:
                return
        await self.downstream.send(frame)


def server_info(source: dict[str, Any], fallback_name: str) -> Any:
    meta = source.get("_meta")
    if isinstance(meta, dict) and isinstance(meta.get(eras.META_SERVER_INFO), dict):
        return meta[eras.META_SERVER_INFO]
    if isinstance(source.get("serverInfo"), dict):
        return source["serverInfo"]
    return {"name": fallback_name, "version": "unknown"}


def capabilities_for_legacy(capabilities: Any) -> dict[str, Any]:
    """A modern upstream's capabilities as a session-era client should see them (extensions
    are a 2026-07-28 notion; change notifications are bridged through subscriptions/listen)."""
    caps = dict(capabilities) if isinstance(capabilities, dict) else {}
    caps.pop("extensions", None)
    return caps


def listenable(capabilities: dict[str, Any]) -> dict[str, Any]:
    """The capabilities with `listChanged` set on each list the server has, so that a listen
    filter asks for all of them."""
    caps = dict(capabilities)
    for section in LISTEN_KINDS.values():
        if isinstance(caps.get(section), dict):
            caps[section] = {**caps[section], "listChanged": True}
    return caps


def delivered_changes(capabilities: dict[str, Any], honoured: dict[str, Any] | None) -> dict[str, Any]:
    """The capabilities with each list's `listChanged` saying whether the listen stream
    delivers its changes (unchanged while the stream has not answered)."""
    if honoured is None:
        return capabilities
    caps = dict(capabilities)
    for key, section in LISTEN_KINDS.items():
        if isinstance(caps.get(section), dict):
            caps[section] = {**caps[section], "listChanged": honoured.get(key) is True}
    return caps


def bridged_capabilities(declared: dict[str, Any]) -> dict[str, Any]:
    """What a session-era upstream is told of a 2026-07-28 client: the capabilities it declared
    that the proxy bridges (sampling, elicitation, roots), with the sub-capabilities it named;
    roots with `listChanged`, which the proxy sends when the client's roots arrive."""
    out: dict[str, Any] = {}
    for key in eras.BRIDGED_CLIENT_CAPABILITIES:
        value = declared.get(key)
        if not isinstance(value, dict):
            continue
        if key == "elicitation":
            out[key] = {mode: {} for mode in ("form", "url") if mode in value} or {"form": {}}
        elif key == "roots":
            out[key] = {"listChanged": True}
        else:
            out[key] = dict(value)
    return out


def covers(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """Whether the capabilities `have` hold every capability and sub-capability of `want`."""
    for key, value in want.items():
        held = have.get(key)
        if not isinstance(held, dict):
            return False
        if isinstance(value, dict) and any(flag not in held for flag in value):
            return False
    return True


def widened(have: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """The union of two capability sets, sub-capabilities included."""
    out = {key: dict(value) if isinstance(value, dict) else value for key, value in have.items()}
    for key, value in want.items():
        held = out.get(key)
        out[key] = {**held, **value} if isinstance(held, dict) and isinstance(value, dict) else value
    return out


def capabilities_for_modern(capabilities: Any) -> dict[str, Any]:
    """A session-era upstream's capabilities as a 2026-07-28 client should see them."""
    caps = dict(capabilities) if isinstance(capabilities, dict) else {}
    caps.pop("tasks", None)  # core tasks became an extension in 2026-07-28; not bridged
    return caps


def complete_for_modern(method: str, reply: Frame) -> Frame:
    if "result" not in reply:
        return reply
    body = jsonrpc.sub_object(reply, "result")
    completed = eras.complete_for_modern(method, body)
    return reply if completed is None else jsonrpc.result(jsonrpc.id_of(reply), completed)


def complete_for_legacy(reply: Frame) -> Frame:
    """A modern upstream's reply as a session-era client's revision defines it."""
    if "result" not in reply:
        return reply
    body = jsonrpc.sub_object(reply, "result")
    translated = eras.for_session_era(body)
    return reply if translated is None else jsonrpc.result(jsonrpc.id_of(reply), translated)
