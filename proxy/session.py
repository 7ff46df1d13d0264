"""One client in front of one upstream: the router and the era translation between them.

A client is in the session era once it sends `initialize`, and is served statelessly whenever a
request names a 2026-07-28 version in `params._meta`. The upstream's era is what the probe found.
Four cases follow:

    client \\ upstream   2026-07-28                         session era
    2026-07-28          forwarded as they are              proxy initializes the upstream with the
                                                           capabilities it can bridge; server
                                                           requests become input_required (MRTR)
    session era         proxy answers initialize, ping,    initialize passes through, so the
                        logging/setLevel; stamps _meta;    upstream sees the client's real
                        input_required becomes server      capabilities; everything forwarded
                        requests to the client

`tools/call` always goes through the pipeline; every other request is forwarded here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
import msgspec

from frugal_proxy import eras, jsonrpc
from frugal_proxy.assembly import Assembly, assemble
from frugal_proxy.bridge import HeldCalls, fulfil_input_required
from frugal_proxy.downstream import ClientGone, DownstreamPeer
from frugal_proxy.errors import BridgeError, ProxyError, UpstreamDown
from frugal_proxy.jsonrpc import Frame, RequestId
from frugal_proxy.own_tools import OwnToolProvider
from frugal_proxy.pipeline import Pipeline, build_pipeline
from frugal_proxy.providers import Provider
from frugal_proxy.providers.mcp_tool import McpToolProvider
from frugal_proxy.records import Call, Exchange, ProgressSink, Route
from frugal_proxy.subscriptions import ListenHub, filter_for_legacy, listen_result, tag
from frugal_proxy.transports.child import ChildStartError
from frugal_proxy.transports.lines import BadLine, FrameReader, Frames
from frugal_proxy.upstream import PROXY_CLIENT_INFO, UpstreamConnection

log = logging.getLogger("frugal_proxy.session")

SUBSCRIBE_METHODS = frozenset({"resources/subscribe", "resources/unsubscribe"})
LIST_CHANGED = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)


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


class Session:
    def __init__(
        self,
        upstream: UpstreamConnection,
        downstream: DownstreamPeer,
        task_group: anyio.abc.TaskGroup,
        *,
        assembly: Assembly | None = None,
        operator: str = "local",
    ) -> None:
        self.upstream = upstream
        self.downstream = downstream
        self._tg = task_group
        self.client = Client()
        self.held = HeldCalls(upstream, task_group)
        self._inflight: dict[RequestId, anyio.CancelScope] = {}
        self._streams: set[RequestId] = set()
        self._idle = anyio.Event()
        self.hub = ListenHub(self.downstream.send, self._subscribe_upstream, self._unsubscribe_upstream)
        self._legacy_uris: set[str] = set()
        self._legacy_listen: anyio.CancelScope | None = None
        self._resubscribing = False
        self._init_lock = anyio.Lock()
        assembly = assembly or assemble()
        self.own_tools = OwnToolProvider(assembly.own_tools)
        self.operator = operator
        providers: dict[str, Provider] = {
            upstream.name: McpToolProvider(upstream.name, self.forward),
            self.own_tools.name: self.own_tools,
        }
        self.pipeline: Pipeline = build_pipeline(providers, assembly.policies)
        upstream.on_server_request = self.on_server_request
        upstream.on_notification = self.on_upstream_notification

    # -- reading the client --------------------------------------------------------------------------

    async def serve(self, reader: FrameReader) -> None:
        """Handle the client's messages until it closes its side."""
        async for event in reader:
            if isinstance(event, BadLine):
                await self._bad_line(event)
            elif event.batch:
                self._tg.start_soon(self._serve_batch, event)
            else:
                await self._on_frame(event.frames[0])

    async def drain(self) -> None:
        """End the client's listen streams, then wait until no request is in flight (bound it
        with a cancel scope)."""
        for stream in list(self._streams):
            scope = self._inflight.get(stream)
            if scope is not None:
                scope.cancel()
        if self._legacy_listen is not None:
            self._legacy_listen.cancel()
        while self._inflight:
            self._idle = anyio.Event()
            await self._idle.wait()

    async def _bad_line(self, event: BadLine) -> None:
        log.warning(
            "client sent a bad message",
            extra={"code": event.error.code, "reason": str(event.error)[:200], "bytes": event.size},
        )
        await self.downstream.send(jsonrpc.error(event.error.request_id, event.error.code, str(event.error)))

    async def _on_frame(self, frame: Frame) -> None:
        if jsonrpc.is_reply(frame):
            if not self.downstream.take_reply(frame):
                log.warning(
                    "client answered a request nobody sent; dropped",
                    extra={"id": str(jsonrpc.id_of(frame))[:40]},
                )
        elif jsonrpc.is_notification(frame):
            await self._on_notification(frame)
        else:
            self._tg.start_soon(self._answer, frame)

    async def _serve_batch(self, event: Frames) -> None:
        replies: list[Frame] = []

        async def one(frame: Frame) -> None:
            reply = await self._reply_to(frame)
            if reply is not None:
                replies.append(reply)

        async with anyio.create_task_group() as tg:
            for frame in event.frames:
                if jsonrpc.is_request(frame):
                    tg.start_soon(one, frame)
                else:
                    await self._on_frame(frame)
        if replies:
            await self.downstream.send(replies)

    async def _answer(self, frame: Frame) -> None:
        reply = await self._reply_to(frame)
        if reply is not None:
            await self.downstream.send(reply)

    async def _reply_to(self, frame: Frame) -> Frame | None:
        """The reply to one client request, or None if the client cancelled it."""
        client_id = jsonrpc.id_of(frame)
        assert client_id is not None
        with anyio.CancelScope() as scope:
            self._inflight[client_id] = scope
            try:
                reply = await self._serve_request(client_id, frame)
            except jsonrpc.MessageError as exc:
                reply = jsonrpc.error(client_id, exc.code, str(exc), _error_data(exc))
            except BridgeError as exc:
                log.warning("bridging failed", extra={"reason": str(exc)[:200]})
                reply = jsonrpc.error(client_id, exc.code, str(exc))
            except (UpstreamDown, ChildStartError) as exc:
                reply = jsonrpc.error(client_id, jsonrpc.INTERNAL_ERROR, str(exc))
            except ClientGone:
                return None
            except ProxyError as exc:
                reply = jsonrpc.error(client_id, jsonrpc.INTERNAL_ERROR, str(exc))
            except Exception as exc:
                log.exception("internal error while serving a request")
                reply = jsonrpc.error(
                    client_id, jsonrpc.INTERNAL_ERROR, f"internal error in frugal-proxy: {type(exc).__name__}"
                )
            finally:
                self._inflight.pop(client_id, None)
                if not self._inflight:
                    self._idle.set()
        if scope.cancelled_caught:
            return None
        return jsonrpc.with_id(reply, client_id)

    # -- routing ---------------------------------------------------------------------------------

    async def _serve_request(self, client_id: RequestId, frame: Frame) -> Frame:
        method = jsonrpc.method_of(frame) or ""
        params = jsonrpc.params_of(frame)
        if method == "initialize":
            return await self._initialize(params)
        meta = eras.modern_meta(params)
        if meta is not None:
            context = eras.validate_modern(client_id, meta)
            client = Client("modern", context.capabilities, context.client_info, context.version)
            client.log_level = context.log_level
            if self.client.era is None:
                self.client.era = "modern"
        elif self.client.era == "legacy":
            client = self.client
        elif method == "ping":
            return jsonrpc.result(None, {})
        else:
            raise jsonrpc.MessageError(
                jsonrpc.INVALID_PARAMS,
                f"missing _meta[{eras.META_VERSION!r}]: a 2026-07-28 request carries its protocol "
                "version and clientCapabilities in params._meta; a session-era client sends "
                "initialize first",
                client_id,
            )
        if method == "server/discover":
            return await self._discover(client)
        await self.upstream.ensure_ready()
        if not client.modern and self.upstream.era == "modern":
            if method == "ping":
                return jsonrpc.result(None, {})
            if method == "logging/setLevel":
                level = jsonrpc.decode_any(params.get("level", msgspec.Raw(b"null")))
                self.client.log_level = level if isinstance(level, str) else None
                return jsonrpc.result(None, {})
        if method == "subscriptions/listen" and client.modern:
            return await self._listen(client_id, params, client)
        if not client.modern and self.upstream.era == "modern" and method in SUBSCRIBE_METHODS:
            return await self._legacy_subscribe(method, params)
        progress = self._progress_sink(params)
        if method == "tools/call":
            return await self._tools_call(client_id, params, client, progress)
        reply = await self.forward(method, params, client, progress)
        if method == "tools/list" and self.own_tools.tools:
            reply = self._with_own_tools(reply)
        return reply

    def _with_own_tools(self, reply: Frame) -> Frame:
        """The upstream's tools/list with the proxy's own tools added to its last page."""
        if "result" not in reply:
            return reply
        body = jsonrpc.sub_object(reply, "result")
        if "nextCursor" in body and jsonrpc.decode_any(body["nextCursor"]) is not None:
            return reply
        tools = jsonrpc.decode_any(body["tools"]) if "tools" in body else []
        if not isinstance(tools, list):
            return reply
        taken = {tool.get("name") for tool in tools if isinstance(tool, dict)}
        tools.extend(tool for tool in self.own_tools.listings() if tool["name"] not in taken)
        body["tools"] = jsonrpc.raw(tools)
        return jsonrpc.result(None, body)

    async def _tools_call(
        self,
        client_id: RequestId,
        params: dict[str, msgspec.Raw],
        client: Client,
        progress: ProgressSink | None,
    ) -> Frame:
        name = jsonrpc.decode_any(params["name"]) if "name" in params else None
        if not isinstance(name, str):
            raise jsonrpc.MessageError(jsonrpc.INVALID_PARAMS, "tools/call needs a string 'name'", client_id)
        provider = self.own_tools.name if name in self.own_tools else self.upstream.name
        exchange = Exchange(
            call=Call(request_id=client_id, tool=name, params=params),
            route=Route(name=name, providers=(provider,)),
            client=client,
            on_progress=progress,
            operator=self.operator,
        )
        return await self.pipeline.run(exchange)

    async def forward(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        on_progress: ProgressSink | None,
    ) -> Frame:
        """Send a request upstream in the upstream's era and bring the answer back in the client's."""
        assert isinstance(client, Client)
        upstream = self.upstream
        await upstream.ensure_ready()
        if upstream.era == "modern":
            out = params if client.modern else eras.add_modern_meta(params, self._stamp())
            reply = await upstream.request(method, out, on_progress=on_progress)
            if client.modern or method not in eras.INPUT_REQUIRED_METHODS:
                return reply

            async def retry(next_params: dict[str, msgspec.Raw]) -> Frame:
                return await upstream.request(method, next_params, on_progress=on_progress)

            return await fulfil_input_required(
                reply, out, capabilities=self.client.capabilities, ask=self.downstream.request, retry=retry
            )
        await self._ensure_upstream_initialized()
        if not client.modern:
            return await upstream.request(method, params, on_progress=on_progress)
        out = eras.strip_modern_meta(params)
        if method in eras.INPUT_REQUIRED_METHODS:
            reply = await self.held.call(method, out, client.capabilities, on_progress)
        else:
            reply = await upstream.request(method, out, on_progress=on_progress)
        return _complete_for_modern(method, reply)

    # -- handshakes --------------------------------------------------------------------------------

    async def _initialize(self, params: dict[str, msgspec.Raw]) -> Frame:
        decoded = {key: jsonrpc.decode_any(value) for key, value in params.items()}
        self.client.era = "legacy"
        capabilities = decoded.get("capabilities")
        self.client.capabilities = capabilities if isinstance(capabilities, dict) else {}
        info = decoded.get("clientInfo")
        self.client.client_info = info if isinstance(info, dict) else None
        requested = decoded.get("protocolVersion")
        upstream = self.upstream
        await upstream.ensure_ready()
        if upstream.era == "legacy":
            async with self._init_lock:
                if upstream.initialize_params is None:
                    reply = await upstream.initialize(decoded)
                    self.client.protocol_version = _reply_version(reply)
                    return reply
            body = dict(upstream.initialize_result or {})
            self.client.protocol_version = str(body.get("protocolVersion", eras.LATEST_HANDSHAKE))
            return jsonrpc.result(None, body)
        discovered = upstream.discover_result or {}
        version = eras.negotiate_handshake(requested)
        self.client.protocol_version = version
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": _capabilities_for_legacy(discovered.get("capabilities")),
            "serverInfo": _server_info(discovered, upstream.name),
        }
        if discovered.get("instructions"):
            result["instructions"] = discovered["instructions"]
        if self._legacy_listen is None:
            self._legacy_listen = anyio.CancelScope()
            self._tg.start_soon(self._listen_for_legacy_client)
        return jsonrpc.result(None, result)

    async def _ensure_upstream_initialized(self) -> None:
        """A session-era upstream that no client initialized is initialized by the proxy."""
        upstream = self.upstream
        if upstream.initialize_params is not None:
            return
        async with self._init_lock:
            if upstream.initialize_params is not None:
                return
            reply = await upstream.initialize(
                {
                    "protocolVersion": eras.LATEST_HANDSHAKE,
                    "capabilities": eras.BRIDGED_CLIENT_CAPABILITIES,
                    "clientInfo": PROXY_CLIENT_INFO,
                }
            )
            problem = jsonrpc.error_of(reply)
            if problem is not None:
                upstream.initialize_params = None
                raise BridgeError(
                    f"upstream {upstream.name!r} refused initialize: {problem[1]}", jsonrpc.INTERNAL_ERROR
                )

    async def _discover(self, client: Client) -> Frame:
        upstream = self.upstream
        await upstream.ensure_ready()
        if upstream.era == "modern":
            body = dict(upstream.discover_result or {})
            body["supportedVersions"] = list(eras.MODERN_VERSIONS)
            body.setdefault("resultType", "complete")
            body.setdefault("ttlMs", 0)
            body.setdefault("cacheScope", "private")
            return jsonrpc.result(None, body)
        await self._ensure_upstream_initialized()
        initialized = upstream.initialize_result or {}
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(eras.MODERN_VERSIONS),
            "capabilities": _capabilities_for_modern(initialized.get("capabilities")),
            "_meta": {eras.META_SERVER_INFO: _server_info(initialized, upstream.name)},
            "ttlMs": 0,
            "cacheScope": "private",
        }
        if initialized.get("instructions"):
            result["instructions"] = initialized["instructions"]
        return jsonrpc.result(None, result)

    # -- change notifications ----------------------------------------------------------------------

    async def _listen(self, client_id: RequestId, params: dict[str, msgspec.Raw], client: Client) -> Frame:
        """A modern client's subscriptions/listen stream; it ends when the client cancels it."""
        upstream = self.upstream
        await upstream.ensure_ready()
        requested = jsonrpc.decode_any(params["notifications"]) if "notifications" in params else {}
        self._streams.add(client_id)
        try:
            if upstream.era == "legacy":
                await self._ensure_upstream_initialized()
                capabilities = (upstream.initialize_result or {}).get("capabilities") or {}
                await self.hub.listen(client_id, requested, capabilities)
                return jsonrpc.result(None, listen_result(client_id))

            async def relay(frame: Frame) -> None:
                await self.downstream.send(tag(frame, client_id))

            reply = await upstream.request("subscriptions/listen", params, on_related=relay)
            if "result" in reply:
                body = jsonrpc.sub_object(reply, "result")
                meta = jsonrpc.sub_object(body, "_meta")
                meta[eras.META_SUBSCRIPTION_ID] = jsonrpc.raw(client_id)
                body["_meta"] = jsonrpc.raw(meta)
                reply = jsonrpc.result(None, body)
            return reply
        finally:
            self._streams.discard(client_id)

    async def _listen_for_legacy_client(self) -> None:
        """Hold one upstream listen stream for a session-era client in front of a modern
        upstream, so that its changes reach the client as ordinary notifications."""
        assert self._legacy_listen is not None
        while True:
            with self._legacy_listen:
                try:
                    await self.upstream.ensure_ready()
                    capabilities = (self.upstream.discover_result or {}).get("capabilities") or {}
                    wanted = filter_for_legacy(capabilities, self._legacy_uris)
                    if not wanted:
                        return
                    params = {"notifications": wanted, "_meta": self._stamp()}
                    await self.upstream.request(
                        "subscriptions/listen", params, on_related=self._relay_untagged
                    )
                except (UpstreamDown, ChildStartError) as exc:
                    log.info("change stream lost; reopening", extra={"reason": str(exc)[:200]})
                await anyio.sleep(1.0)
            if self._legacy_listen.cancel_called and not self._resubscribing:
                return
            self._resubscribing = False
            self._legacy_listen = anyio.CancelScope()

    async def _relay_untagged(self, frame: Frame) -> None:
        if jsonrpc.method_of(frame) == "notifications/subscriptions/acknowledged":
            return
        await self.downstream.send(tag(frame, None))

    async def _legacy_subscribe(self, method: str, params: dict[str, msgspec.Raw]) -> Frame:
        uri = jsonrpc.decode_any(params["uri"]) if "uri" in params else None
        if not isinstance(uri, str):
            raise jsonrpc.MessageError(jsonrpc.INVALID_PARAMS, f"{method} needs a string 'uri'")
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

    def _stamp(self) -> dict[str, Any]:
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

    # -- notifications and server requests -------------------------------------------------------

    def _progress_sink(self, params: dict[str, msgspec.Raw]) -> ProgressSink | None:
        meta = jsonrpc.sub_object(params, "_meta")
        token = meta.get("progressToken")
        if token is None:
            return None
        downstream = self.downstream

        async def sink(progress: dict[str, msgspec.Raw]) -> None:
            restored = dict(progress)
            restored["progressToken"] = token
            await downstream.send(jsonrpc.notification("notifications/progress", restored))

        return sink

    async def _on_notification(self, frame: Frame) -> None:
        method = jsonrpc.method_of(frame)
        if method == "notifications/cancelled":
            params = jsonrpc.params_of(frame)
            target = jsonrpc.decode_any(params["requestId"]) if "requestId" in params else None
            scope = self._inflight.get(target) if isinstance(target, int | str) else None
            if scope is not None:
                scope.cancel()
            return
        if method == "notifications/initialized":
            return  # the proxy sent its own when it initialized the upstream
        upstream = self.upstream
        if not upstream.running:
            log.warning("client notification dropped: upstream is down", extra={"method": method})
            return
        if upstream.era == "modern" and method == "notifications/roots/list_changed":
            return  # 2026-07-28 servers ask for roots inside each call; nothing to tell them
        try:
            await upstream.notify(method or "", frame.get("params"))
        except UpstreamDown:
            log.warning("client notification dropped: upstream is down", extra={"method": method})

    async def on_server_request(self, upstream: UpstreamConnection, frame: Frame) -> None:
        method = jsonrpc.method_of(frame)
        upstream_id = jsonrpc.id_of(frame)
        if method == "ping":
            await upstream.send_reply(jsonrpc.result(upstream_id, {}))
        elif self.client.era == "legacy":
            self._tg.start_soon(self._relay_server_request, upstream, frame)
        else:
            await self.held.attach(frame)

    async def _relay_server_request(self, upstream: UpstreamConnection, frame: Frame) -> None:
        upstream_id = jsonrpc.id_of(frame)
        try:
            reply = await self.downstream.request(jsonrpc.method_of(frame) or "", frame.get("params"))
        except ClientGone:
            reply = jsonrpc.error(upstream_id, jsonrpc.INTERNAL_ERROR, "the client went away")
        await upstream.send_reply(jsonrpc.with_id(reply, upstream_id))

    async def on_upstream_notification(self, upstream: UpstreamConnection, frame: Frame) -> None:
        method = jsonrpc.method_of(frame) or ""
        if self.client.modern:
            if method in LIST_CHANGED:
                await self.hub.publish(frame)  # to the listen streams that opted in, and no one else
                return
            if method == "notifications/message" and self.client.log_level is None:
                return
        await self.downstream.send(frame)


def _error_data(exc: jsonrpc.MessageError) -> Any:
    data = getattr(exc, "data", None)
    return data() if callable(data) else None


def _reply_version(reply: Frame) -> str | None:
    if "result" not in reply:
        return None
    body = jsonrpc.decode_any(reply["result"])
    version = body.get("protocolVersion") if isinstance(body, dict) else None
    return version if isinstance(version, str) else None


def _server_info(source: dict[str, Any], fallback_name: str) -> Any:
    meta = source.get("_meta")
    if isinstance(meta, dict) and isinstance(meta.get(eras.META_SERVER_INFO), dict):
        return meta[eras.META_SERVER_INFO]
    if isinstance(source.get("serverInfo"), dict):
        return source["serverInfo"]
    return {"name": fallback_name, "version": "unknown"}


def _capabilities_for_legacy(capabilities: Any) -> dict[str, Any]:
    """A modern upstream's capabilities as a session-era client should see them (extensions
    are a 2026-07-28 notion; change notifications are bridged through subscriptions/listen)."""
    caps = dict(capabilities) if isinstance(capabilities, dict) else {}
    caps.pop("extensions", None)
    return caps


def _capabilities_for_modern(capabilities: Any) -> dict[str, Any]:
    """A session-era upstream's capabilities as a 2026-07-28 client should see them."""
    caps = dict(capabilities) if isinstance(capabilities, dict) else {}
    caps.pop("tasks", None)  # core tasks became an extension in 2026-07-28; not bridged
    return caps


def _complete_for_modern(method: str, reply: Frame) -> Frame:
    if "result" not in reply:
        return reply
    try:
        body = jsonrpc.sub_object(reply, "result")
    except msgspec.DecodeError:
        return reply
    completed = eras.complete_for_modern(method, body)
    return reply if completed is None else jsonrpc.result(jsonrpc.id_of(reply), completed)
