"""One client in front of one or more upstreams: reading the client, and the router.

Requests the proxy answers itself (`initialize`, `server/discover`, `ping`, merged lists when
there are several upstreams), requests it forwards to the upstream that owns a name or URI
(prompts, resources, completions), and `tools/call`, which always goes through the pipeline.
The era translation towards each upstream is its `UpstreamLink`'s business. With a single
upstream nothing is renamed or re-paged: the proxy is transparent.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import anyio
import anyio.abc
import msgspec

from frugal_proxy import tracing
from frugal_proxy.bridge.downstream import ClientGone, ClientUnreachable, DownstreamPeer
from frugal_proxy.bridge.link import Client, UpstreamLink, complete_for_legacy
from frugal_proxy.bridge.root_sets import DEFAULT_LIMIT as DEFAULT_ROOT_SETS
from frugal_proxy.capabilities import EXECUTE_TOOL, TOOLS, request_of
from frugal_proxy.config import ToolFilter
from frugal_proxy.errors import ProxyError, UpstreamDown
from frugal_proxy.pipeline.assembly import Assembly, assemble, provider_key
from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId
from frugal_proxy.protocol.subscriptions import acknowledgement, listen_result, merge_filters
from frugal_proxy.providers import Provider
from frugal_proxy.providers.mcp_tool import McpToolProvider
from frugal_proxy.providers.own_tools import LISTING_TTL_MS, OwnToolProvider
from frugal_proxy.providers.upstream_tool import UpstreamToolProvider
from frugal_proxy.records import Call, Decision, Exchange, ProgressSink, StreamCut
from frugal_proxy.router.answerers import Answerers, Deadlines
from frugal_proxy.router.catalog import KINDS, Catalog, ToolHidden
from frugal_proxy.router.handshakes import Handshakes
from frugal_proxy.router.plain import PlainCall, error_reply
from frugal_proxy.router.routes import RouteTable, RouteUnavailable
from frugal_proxy.transports.lines import BadLine, FrameReader
from frugal_proxy.upstream.base import UpstreamBase

log = logging.getLogger("frugal_proxy.session")

SUBSCRIBE_METHODS = frozenset({"resources/subscribe", "resources/unsubscribe"})
URI_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})


@dataclass(frozen=True, slots=True)
class Origin:
    """What one request brings beside its frame: who it acts for (None: the router's own
    operator), where its own notifications go (None: the downstream at large), the client's
    request headers that go on with it, and what to tell when an upstream closes the request's
    response stream mid-call (its HTTP response stream may then close too)."""

    operator: str | None = None
    stream: ProgressSink | None = None
    headers: Mapping[str, str] | None = None
    on_cut: StreamCut | None = None


STDIO = Origin()


class ReadRequest(NamedTuple):
    """What a caller has decoded of a request already (Router.open_plain): its params, its id
    and its `params._meta` (None when not read)."""

    params: dict[str, msgspec.Raw]
    client_id: RequestId | None
    meta: dict[str, msgspec.Raw] | None


class Router:
    def __init__(
        self,
        upstreams: UpstreamBase | list[UpstreamBase],
        downstream: DownstreamPeer,
        task_group: anyio.abc.TaskGroup,
        *,
        assembly: Assembly | None = None,
        operator: str = "local",
        prefixes: dict[str, str | None] | None = None,
        filters: dict[str, ToolFilter] | None = None,
        prices: dict[str, int] | None = None,
        timeouts: dict[str, float | None] | None = None,
        page_size: int = 500,
        connect: Callable[[str], UpstreamBase] | None = None,
        root_sets: int = DEFAULT_ROOT_SETS,
        transport: str = "pipe",
        session_id: str | None = None,
    ) -> None:
        """`connect(name)` makes a fresh connection to upstream `name`: given where many
        clients share this router (the HTTP endpoint's stateless side), for at most
        `root_sets` root sets per upstream (bridge.root_sets). `transport` ("pipe": stdio,
        "tcp": HTTP) and `session_id` (an HTTP session's) are what its requests' spans say."""
        self.transport = transport
        self.session_id = session_id
        connections = upstreams if isinstance(upstreams, list) else [upstreams]
        self.downstream = downstream
        self._tg = task_group
        self.client = Client()
        deadlines = timeouts or {}
        self.links = [
            UpstreamLink(
                up,
                self.client,
                downstream,
                task_group,
                on_change=self._changed,
                deadline=deadlines.get(up.name),
                connect=None if connect is None else functools.partial(connect, up.name),
                root_sets=root_sets,
            )
            for up in connections
        ]
        self._link_by_name = {link.name: link for link in self.links}
        self.catalog = Catalog(self.links, prefixes, filters, page_size)
        self.single = len(self.links) == 1
        self._inflight: dict[RequestId, anyio.CancelScope | PlainCall] = {}
        self._answerers = Answerers(task_group, self._answer)
        self._handed_off = 0  # stdio requests handed to a task and not answered yet
        self._deadlines = Deadlines()
        self._batches = 0  # stdio batches being served
        self._streams: set[RequestId] = set()
        self._idle = anyio.Event()
        assembly = assembly or assemble()
        self.assembly = assembly
        if assembly.tool_names is not None:
            self.catalog.on_tools = assembly.tool_names.learn
        self.own_tools = OwnToolProvider(assembly.own_tools)
        self.operator = operator
        providers: dict[str, Provider] = {
            # The link bounds every request to its upstream, a tools/call included.
            link.name: McpToolProvider(link.name, link.forward, price_micros=(prices or {}).get(link.name, 0))
            for link in self.links
        }
        providers[self.own_tools.name] = self.own_tools
        providers.update((provider_key(provider.spec), provider) for provider in assembly.providers)
        for spec, options in assembly.upstream_tools:
            link = self._link_by_name[str(options.upstream)]
            providers[provider_key(spec)] = UpstreamToolProvider(spec, options, link.forward)
        for key, upstream, tool in assembly.candidates:  # the candidates of [routes.NAME]
            # One deadline governs a candidate's call too: its link's (the upstream's timeout).
            link = self._link_by_name[upstream]
            providers[key] = McpToolProvider(upstream, link.forward, (prices or {}).get(upstream, 0), tool=tool)
        self.pipeline: Pipeline = build_pipeline(providers, assembly.policies, assembly.dispatch)
        # A single upstream's own tools/call may go by `_plain_call`: its provider is the link's.
        self._plain_link = self.links[0] if self.single else None
        self._plain_spec = providers[self.links[0].name].spec if self.single else None
        self.routes = RouteTable(self.links, self.catalog, self.own_tools)
        for route in assembly.routes:
            self.routes.add(route)
        for key, upstream, tool in assembly.candidates:
            self.routes.candidate(key, upstream, tool)
        # What the proxy lists of its own beside the upstreams' tools: its own tools and the
        # routed capabilities that have a provider.
        routed = [TOOLS[r.capability] for r in assembly.routes if r.capability]
        self.listed_execute = bool(routed)
        self.listed = [*self.own_tools.listings(), *routed, *([EXECUTE_TOOL] if routed else [])]
        self.handshakes = Handshakes(self.links, self.client, bool(self.listed or assembly.candidates))

    # -- reading the client --------------------------------------------------------------------------

    async def serve(self, reader: FrameReader) -> None:
        """Handle the client's messages until it closes its side."""
        try:
            async for event in reader:
                if reader.starts_burst:  # more of this read's lines follow: what they send upstream
                    self._hold_upstream_writes()  # goes out together when the loop turn ends
                if isinstance(event, BadLine):
                    await self._bad_line(event)
                elif event.batch:
                    self._start_batch(event.frames)
                elif not await self._plain_call(event.frames[0], event.messages):
                    await self._on_frame(event.frames[0])
        finally:
            self._answerers.close()

    def _hold_upstream_writes(self) -> None:
        for link in self.links:
            link.upstream.hold_writes()

    async def drain(self) -> None:
        """End the client's listen streams, then wait until no request is in flight (bound it
        with a cancel scope)."""
        for stream in list(self._streams):
            scope = self._inflight.get(stream)
            if scope is not None:
                scope.cancel()
        for link in self.links:
            link.stop_listening()
        # A request handed to a task that has not run yet is not in the table yet either.
        while self._inflight or self._handed_off or self._batches:
            self._idle = anyio.Event()
            await self._idle.wait()

    async def cancel_in_flight(self, grace: float = 1.0) -> None:
        """Cancel every request still in flight, each upstream too, and wait (up to `grace`
        seconds) for the cancellations to go out: the client is gone and nobody will read them."""
        for scope in list(self._inflight.values()):
            scope.cancel()
        with anyio.move_on_after(grace):
            await self.drain()

    async def reply_to(
        self,
        frame: Frame,
        *,
        operator: str | None = None,
        stream: ProgressSink | None = None,
        headers: Mapping[str, str] | None = None,
        resume: Exchange | None = None,
        on_cut: StreamCut | None = None,
    ) -> Frame | None:
        """The reply to one request from a client that is not on stdio (None if it was cancelled).
        `operator` is who the request acts for (over HTTP: its bearer token's operator; else this
        router's own); `stream` is where the request's own notifications (its progress, a listen
        stream's changes) go when that is not the downstream at large: its HTTP response stream;
        `headers` are the client's request headers that go on with a tools/call (Mcp-Param-*);
        `resume` is the exchange `open_plain` handed back, to go on with; `on_cut` is told when
        an upstream closes the request's stream before its reply (and resumes it)."""
        return await self._reply_to(frame, Origin(operator, stream, headers, on_cut), resume)

    async def take_in(self, frame: Frame) -> None:
        """A notification or a reply (to a server-to-client request) from a client that is not on stdio."""
        await self._on_frame(frame)

    async def _bad_line(self, event: BadLine) -> None:
        elements = event.elements() if self.client.protocol_version == eras.BATCH_VERSION else None
        if elements is not None:
            self._start_batch(elements)  # each bad element answered alone
            return
        log.warning(
            "client sent a bad message",
            extra={"code": event.error.code, "reason": str(event.error)[:200], "bytes": event.size},
        )
        await self.downstream.send(jsonrpc.error(event.error.request_id, event.error.code, str(event.error)))

    async def _on_frame(self, frame: Frame) -> None:
        try:
            await self._take(frame)
        except jsonrpc.MessageError as exc:  # a value too long to have been checked whole
            log.warning("client sent a message the proxy cannot use; dropped", extra={"reason": str(exc)[:200]})

    async def _take(self, frame: Frame) -> None:
        if jsonrpc.is_reply(frame):
            if not self.downstream.take_reply(frame):
                log.warning(
                    "client answered a request nobody sent; dropped",
                    extra={"id": str(jsonrpc.id_of(frame))[:40]},
                )
        elif jsonrpc.is_notification(frame):
            await self._on_notification(frame)
        else:
            self._hand_off(frame)

    def _hand_off(self, frame: Frame, resume: Exchange | None = None) -> None:
        """A request for a task to answer; until it is answered no later tools/call overtakes it
        by `_plain_call` (which writes upstream at once, where a task takes a loop turn or more)."""
        self._handed_off += 1
        self._answerers.submit(frame, resume)

    def _start_batch(self, elements: Sequence[Frame | jsonrpc.MessageError]) -> None:
        self._batches += 1
        self._tg.start_soon(self._serve_batch, elements)

    async def _serve_batch(self, elements: Sequence[Frame | jsonrpc.MessageError]) -> None:
        try:
            await self._serve_elements(elements)
        finally:
            self._batches -= 1
            self._idle.set()  # `drain` looks again

    async def _serve_elements(self, elements: Sequence[Frame | jsonrpc.MessageError]) -> None:
        """A batch's requests served together and answered as one array; an element that is
        not a usable message gets its own error in it (JSON-RPC 2.0's batch rules)."""
        replies = jsonrpc.element_errors(elements)
        if replies:
            log.warning(
                "client sent a bad batch element",
                extra={"count": len(replies), "first": str(jsonrpc.error_of(replies[0]))[:200]},
            )
        frames = [element for element in elements if not isinstance(element, jsonrpc.MessageError)]

        async def one(frame: Frame) -> None:
            reply = await self._reply_to(frame, STDIO)
            if reply is not None:
                replies.append(reply)

        async with anyio.create_task_group() as tg:
            for frame in frames:
                if jsonrpc.is_request(frame):
                    tg.start_soon(one, frame)
                else:
                    await self._on_frame(frame)
        if replies:
            await self.downstream.send(replies)

    async def _answer(self, frame: Frame, resume: Exchange | None = None) -> None:
        try:
            reply = await self._reply_to(frame, STDIO, resume)
            if reply is not None:
                await self.downstream.send(reply)
        finally:
            self._handed_off -= 1
            if not self._handed_off:
                self._idle.set()  # `drain` looks again

    async def _plain_call(self, frame: Frame, messages: list[Any] | None = None) -> bool:
        """Serve a plain tools/call of the stdio client without a task of its own: the request
        goes upstream from this reader, and the reply comes back from the upstream's reader
        (`PlainCall`). Plain: one upstream, both in the session era, the tool the upstream's
        own, and the pipeline calling it once as it is (`Pipeline.open`). Whatever else, or
        anything unusual about the request, is left to the tasks that serve the rest (False).
        `messages`: the line's message as its check decoded it (`Frames.messages`), if it was."""
        if self._handed_off or self._batches or self.client.era != "legacy":
            return False
        exchange = await self._plain_exchange(frame, STDIO, self.client, messages[0] if messages else None)
        if exchange is None:
            return False
        if await self._start_plain(frame, exchange, None) is None:
            self._hand_off(frame, exchange)  # answered at admit, or more to do than one plain call
        return True

    async def open_plain(
        self,
        frame: Frame,
        *,
        operator: str | None = None,
        on_reply: Callable[[Frame | None], object],
        read: ReadRequest | None = None,
    ) -> PlainCall | Exchange | None:
        """A plain tools/call (as `_plain_call` has it) of a client that is not on stdio, served
        without the cancel scopes, timers and task hops of `reply_to`: the request goes upstream
        from the caller's task and `on_reply` gets the reply (with the request's id, as
        `reply_to` returns it; None when it was cancelled) from the upstream's reader. The call
        when it is under way or answered (its `cancel` withdraws it); None when it is not plain
        (`reply_to` serves it); the exchange when the pipeline answered it at admit or has more
        to do than one plain call: `reply_to` with it as `resume` goes on from there. `read` is
        what the caller has decoded of the frame already, so that it is not decoded again."""
        origin = Origin(operator) if operator is not None else STDIO
        exchange = await self._plain_exchange(frame, origin, read=read)
        if exchange is None:
            return None
        return await self._start_plain(frame, exchange, on_reply) or exchange

    async def _start_plain(
        self, frame: Frame, exchange: Exchange, on_reply: Callable[[Frame | None], object] | None
    ) -> PlainCall | None:
        """Open `exchange` and send it upstream: the call, under way or answered (an error the
        pipeline raised goes to the client); None, out of the in-flight table, when there is
        more to do than one plain call."""
        call = PlainCall(self, frame, exchange, on_reply)
        try:
            spec = await self.pipeline.open(exchange)
        except Exception as exc:
            call.release()
            await call.send(jsonrpc.with_id(error_reply(call.client_id, frame, exc), call.client_id))
            return call
        except BaseException:
            call.release()
            raise
        return call if call.begin(spec) else None

    async def _plain_exchange(
        self,
        frame: Frame,
        origin: Origin,
        client: Client | None = None,
        message: Any = None,
        *,
        read: ReadRequest | None = None,
    ) -> Exchange | None:
        """The exchange of a tools/call that may go by a plain call, opened by neither: None
        when it may not (several upstreams, a client the link must translate for, progress
        asked for on an HTTP response stream, a routed tool, an id in flight already).
        `client` is the stdio client; over HTTP it is the one the request's _meta describes.
        `message` is the stdio request's whole message as its line's check decoded it, when it
        was: its id, tool name and _meta are read from it instead of decoded again. `read` is
        what an HTTP caller decoded of the frame already."""
        link = self._plain_link
        if link is None or frame.get("method") != _TOOLS_CALL or "id" not in frame or tracing.live is not None:
            return None  # (a traced call goes the general way: its spans open around the reply)
        try:
            params = jsonrpc.params_of(frame) if read is None else read.params
            if client is not None and message is not None:
                body = message.get("params")
                body = body if isinstance(body, dict) else {}
                meta = body.get("_meta")
                if isinstance(meta, dict) and (eras.META_VERSION in meta or "progressToken" in meta):
                    return await self._plain_exchange(frame, origin, client)  # read as the slow path would
                client_id, name, progress = message["id"], body.get("name"), None
            else:
                client_id, meta = (jsonrpc.id_of(frame), None) if read is None else (read.client_id, read.meta)
                if client is None:
                    client = self._client_of(client_id, "tools/call", params, meta) if client_id is not None else None
                    if client is None:
                        return None
                elif "_meta" in params and eras.modern_meta(params) is not None:
                    return None  # a stdio session-era client's request in 2026-07-28 form
                name = jsonrpc.decode_any(params["name"]) if "name" in params else None
                # (a _meta read already that has no progressToken needs no second look)
                token = None if meta is not None and "progressToken" not in meta else jsonrpc.progress_token(params)
                if origin is not STDIO and token is not None:
                    return None  # its progress goes on the request's own response stream
                progress = self._sink_for(token, None)
            if not link.passes_through(client):
                return None
        except jsonrpc.MessageError:
            return None  # the slow path says what is wrong
        if client_id is None or client_id in self._inflight or not isinstance(name, str):
            return None
        if name == EXECUTE_TOOL["name"] and self.listed_execute:
            return None
        try:
            route, upstream_params = await self.routes.resolve(name, params, client)
        except ToolHidden:
            return None  # refused by the slow path, which says why
        if route.providers != (link.name,):
            return None
        return Exchange(
            call=Call(request_id=client_id, tool=name, params=upstream_params),
            route=route,
            client=client,
            on_progress=progress,
            operator=origin.operator or self.operator,
        )

    async def _reply_to(self, frame: Frame, origin: Origin, resume: Exchange | None = None) -> Frame | None:
        """The reply to one client request, or None if the client cancelled it; with `resume`,
        a tools/call whose exchange `_plain_call` opened goes on through the pipeline from there."""
        client_id = jsonrpc.id_of(frame)
        assert client_id is not None
        if tracing.live is None:
            return await self._replied(client_id, frame, origin, resume)
        method = jsonrpc.method_of(frame) or ""
        version = self.client.protocol_version if self.client.era == "legacy" else None
        params = jsonrpc.params_of(frame)
        with tracing.server_span(
            method, client_id, params, version=version, transport=self.transport, session_id=self.session_id
        ) as span:
            reply = await self._replied(client_id, frame, origin, resume)
            tracing.note_reply(span, reply, method)
            return reply

    async def _replied(
        self, client_id: RequestId, frame: Frame, origin: Origin, resume: Exchange | None
    ) -> Frame | None:
        with anyio.CancelScope() as scope:
            self._inflight[client_id] = scope
            try:
                if resume is None:
                    reply = await self._serve_request(client_id, frame, origin)
                else:
                    reply = self._in_clients_era(resume, await self.pipeline.proceed(resume))
            except ClientGone as exc:
                if not isinstance(exc, ClientUnreachable):
                    return None
                reply = jsonrpc.error(client_id, jsonrpc.INTERNAL_ERROR, str(exc))
            except Exception as exc:
                reply = error_reply(client_id, frame, exc)
            finally:
                self._inflight.pop(client_id, None)
                if not self._inflight:
                    self._idle.set()
        if scope.cancelled_caught:
            return None
        return jsonrpc.with_id(reply, client_id)

    # -- routing ---------------------------------------------------------------------------------

    async def _serve_request(self, client_id: RequestId, frame: Frame, origin: Origin) -> Frame:
        method = jsonrpc.method_of(frame) or ""
        params = jsonrpc.params_of(frame)
        if method == "initialize":
            return await self.handshakes.initialize(params)
        client = self._client_of(client_id, method, params)
        if client is None:
            return jsonrpc.result(None, {})  # a ping before initialize
        if method == "server/discover":
            return await self.handshakes.discover(client)
        removed = removed_in_modern(method, client.protocol_version) if client.modern else None
        if removed is not None:
            raise jsonrpc.MessageError(jsonrpc.METHOD_NOT_FOUND, removed, client_id)
        if not client.modern:
            if method == "ping":
                return jsonrpc.result(None, {})
            if method == "logging/setLevel":
                return await self._set_level(params)
        if method == "subscriptions/listen" and client.modern:
            return await self._listen(client_id, params, origin.stream)
        progress = self._progress_sink(params, origin.stream)
        if method == "tools/call":
            return await self._tools_call(client_id, params, client, progress, origin)
        if method in KINDS and not self.single:
            extra = await self._listed(client, params) if method == "tools/list" else ()
            page = jsonrpc.result(None, await self.catalog.page(method, params, client, extra))
            return self._own_tools_ttl(page) if method == "tools/list" and extra else page
        link, params = await self._route(method, params, client)
        if not client.modern and method in SUBSCRIBE_METHODS and link.upstream.era == "modern":
            return await link.legacy_subscribe(method, jsonrpc.decode_any(params["uri"]))
        reply = await link.forward(method, params, client, progress, on_cut=origin.on_cut)
        if method == "tools/list":
            reply = self.catalog.without_hidden(link.name, reply)  # its `tools` filter
            self.catalog.note_listed(reply)  # the governor keeps shaped results valid against them
            listed = await self._listed(client, params)
            if listed:
                reply = self._with_own_tools(reply, listed)
        return reply

    async def _listed(self, client: Client, params: dict[str, msgspec.Raw]) -> list[dict[str, Any]]:
        """What the proxy lists beside the upstreams' tools: its own tools, the routed
        capabilities and each `[routes.NAME]` tool (as its first listed candidate declares it)."""
        if not self.routes.has_candidates:
            return self.listed
        return [*self.listed, *await self.routes.listings(client, params)]

    def _client_of(
        self,
        client_id: RequestId,
        method: str,
        params: dict[str, msgspec.Raw],
        meta: dict[str, msgspec.Raw] | None = None,
    ) -> Client | None:
        """The client a request comes from: the one its _meta describes (`meta`, when the caller
        has read it already), else the session's."""
        meta = eras.modern_meta(params) if meta is None else meta if eras.META_VERSION in meta else None
        if meta is not None:
            context = eras.validate_modern(client_id, meta)
            if self.client.era is None:
                self.client.era = "modern"
            client = Client("modern", context.capabilities, context.client_info, context.version)
            client.log_level = context.log_level
            return client
        if self.client.era == "legacy":
            return self.client
        if method == "ping":
            return None
        raise jsonrpc.MessageError(
            jsonrpc.INVALID_PARAMS,
            f"missing _meta[{eras.META_VERSION!r}]: a 2026-07-28 request carries its protocol "
            "version and clientCapabilities in params._meta; a session-era client sends "
            "initialize first",
            client_id,
        )

    async def _route(
        self, method: str, params: dict[str, msgspec.Raw], client: Client
    ) -> tuple[UpstreamLink, dict[str, msgspec.Raw]]:
        """The link that owns the request's name or URI, and the params as that upstream knows them."""
        if self.single:
            return self.links[0], params
        if method == "prompts/get":
            name = _string(params, "name", method)
            owner = await self.catalog.owner_of(method, name, params, client)
            return owner.link, {**params, "name": jsonrpc.raw(owner.original)}
        if method in URI_METHODS:
            uri = _string(params, "uri", method)
            owner = await self.catalog.owner_of_uri(uri, params, client)
            return owner.link, {**params, "uri": jsonrpc.raw(owner.original)}
        if method == "completion/complete":
            ref = jsonrpc.decode_any(params["ref"]) if "ref" in params else None
            if isinstance(ref, dict) and ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
                owner = await self.catalog.owner_of("prompts/get", ref["name"], params, client)
                return owner.link, {**params, "ref": jsonrpc.raw({**ref, "name": owner.original})}
            if isinstance(ref, dict) and isinstance(ref.get("uri"), str):
                owner = await self.catalog.owner_of_uri(ref["uri"], params, client)
                return owner.link, {**params, "ref": jsonrpc.raw({**ref, "uri": owner.original})}
            raise jsonrpc.MessageError(jsonrpc.INVALID_PARAMS, "completion/complete needs a ref/prompt or ref/resource")
        raise jsonrpc.MessageError(
            jsonrpc.METHOD_NOT_FOUND,
            f"{method} is not routed when frugal-proxy serves several upstreams",
        )

    async def _tools_call(
        self,
        client_id: RequestId,
        params: dict[str, msgspec.Raw],
        client: Client,
        progress: ProgressSink | None,
        origin: Origin,
    ) -> Frame:
        name = _string(params, "name", "tools/call")
        request: Any = None
        trace: list[Decision] = []
        if name == EXECUTE_TOOL["name"] and self.listed_execute:
            try:
                executed = self.routes.execute(request_of("execute", _arguments(params)))
            except ValueError as exc:
                return _in_era(client, jsonrpc.result(None, jsonrpc.tool_error_result(f"{name}: {exc}")))
            route, request, upstream_params = executed.route, executed.request, params
            trace.append(Decision("route", "execute", "classified", executed.why))
        else:
            try:
                route, upstream_params = await self.routes.resolve(name, params, client)
            except RouteUnavailable as exc:
                log.warning("call to a tool of an upstream that is down", extra={"tool": name})
                return _in_era(client, jsonrpc.result(None, jsonrpc.tool_error_result(str(exc))))
            except ToolHidden as exc:
                log.warning("call to a tool the config hides; refused", extra={"tool": name[:100]})
                return _in_era(client, jsonrpc.result(None, jsonrpc.tool_error_result(str(exc))))
            if route.capability is not None:
                try:
                    request = request_of(route.capability, _arguments(params))
                except ValueError as exc:
                    return _in_era(client, jsonrpc.result(None, jsonrpc.tool_error_result(f"{name}: {exc}")))
        exchange = Exchange(
            trace=trace,
            request=request,
            call=Call(request_id=client_id, tool=name, params=upstream_params, forwarded_headers=origin.headers),
            route=route,
            client=client,
            on_progress=progress,
            on_cut=origin.on_cut,
            operator=origin.operator or self.operator,
        )
        reply = self._in_clients_era(exchange, await self.pipeline.run(exchange))
        if tracing.live is not None and exchange.receipt is not None:
            receipt = exchange.receipt
            span = tracing.current_span()
            tracing.note_receipt(span, receipt.provider_used, receipt.total_micros, len(receipt.attempts))
        return reply

    def _in_clients_era(self, exchange: Exchange, reply: Frame) -> Frame:
        """A tools/call reply in the client's era: an upstream tool's reply as it came (its link
        put it in the client's era); the proxy's own (a tool error, a routed answer, a refusal,
        the governor's cut) without what only 2026-07-28 defines, for a session-era client."""
        outcome, route = exchange.outcome, exchange.route
        if outcome is not None and reply is outcome.reply and route.capability is None:
            if self.own_tools.name not in route.providers:
                return reply
        return _in_era(exchange.client, reply)

    def _with_own_tools(self, reply: Frame, listed: list[dict[str, Any]]) -> Frame:
        """The one upstream's tools/list with the proxy's own tools added to its last page (the
        upstream pages its own list; several upstreams' merged list pages them with the rest)."""
        if "result" not in reply:
            return reply
        body = jsonrpc.sub_object(reply, "result")
        if "nextCursor" in body and jsonrpc.decode_any(body["nextCursor"]) is not None:
            return reply
        tools = jsonrpc.decode_any(body["tools"]) if "tools" in body else []
        if not isinstance(tools, list):
            return reply
        taken = {tool.get("name") for tool in tools if isinstance(tool, dict)}
        tools.extend(tool for tool in listed if tool["name"] not in taken)
        body["tools"] = jsonrpc.raw(tools)
        return self._own_tools_ttl(jsonrpc.result(None, body))

    def _own_tools_ttl(self, reply: Frame) -> Frame:
        """A modern client's page: its cache hints cover the own tools' part too."""
        body = jsonrpc.sub_object(reply, "result")
        if "ttlMs" not in body:
            return reply
        ttl = jsonrpc.decode_any(body["ttlMs"])
        ttl = ttl if isinstance(ttl, int) and ttl >= 0 else 0
        body["ttlMs"] = jsonrpc.raw(min(ttl, LISTING_TTL_MS))
        return jsonrpc.result(None, body)

    # -- logging ------------------------------------------------------------------------------------

    async def _set_level(self, params: dict[str, msgspec.Raw]) -> Frame:
        """A session-era client's level, checked before anything keeps it: a refused level
        changes nothing later requests carry."""
        sent = jsonrpc.decode_any(params["level"]) if "level" in params else None
        level = eras.log_level(sent, "logging/setLevel params.level")
        self.client.log_level = level
        for link in self.links:
            if link.upstream.running and link.upstream.era == "legacy":
                await link.forward("logging/setLevel", params, self.client, None)
        return jsonrpc.result(None, {})

    # -- change notifications ----------------------------------------------------------------------

    async def _listen(
        self, client_id: RequestId, params: dict[str, msgspec.Raw], own_stream: ProgressSink | None
    ) -> Frame:
        """A modern client's subscriptions/listen stream, over every upstream; it ends when the
        client cancels it."""
        requested = jsonrpc.decode_any(params["notifications"]) if "notifications" in params else {}
        requested = requested if isinstance(requested, dict) else {}
        meta = jsonrpc.sub_object(params, "_meta")
        self._streams.add(client_id)
        if own_stream is not None:  # over HTTP: the stream is the listen request's own response
            self.downstream.listeners[client_id] = own_stream
        try:
            async with anyio.create_task_group() as tg:
                accepted: list[dict[str, Any]] = []
                for link in self.links:
                    try:
                        accepted.append(await tg.start(link.listen, client_id, requested, meta))
                    except (UpstreamDown, ProxyError) as exc:
                        log.warning(
                            "upstream left out of a listen stream",
                            extra={"upstream": link.name, "reason": str(exc)[:200]},
                        )
                await self.downstream.send(acknowledgement(client_id, merge_filters(accepted)))
            return jsonrpc.result(None, listen_result(client_id))
        finally:
            self._streams.discard(client_id)
            self.downstream.listeners.pop(client_id, None)

    async def _changed(self, link: UpstreamLink, frame: Frame) -> None:
        self.catalog.invalidate(link, jsonrpc.method_of(frame) or "")

    # -- notifications -----------------------------------------------------------------------------

    def _progress_sink(self, params: dict[str, msgspec.Raw], stream: ProgressSink | None) -> ProgressSink | None:
        return self._sink_for(jsonrpc.progress_token(params), stream)

    def _sink_for(self, token: msgspec.Raw | None, stream: ProgressSink | None) -> ProgressSink | None:
        """Where the progress of a request with this progress token goes; None without one."""
        if token is None:
            return None
        downstream = self.downstream

        async def sink(progress: dict[str, msgspec.Raw]) -> None:
            restored = dict(progress)
            restored["progressToken"] = token
            notification = jsonrpc.notification("notifications/progress", restored)
            if stream is not None:
                await stream(notification)
            else:
                await downstream.send(notification)

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
            return  # the proxy sent its own when it initialized each upstream
        for link in self.links:
            upstream = link.upstream
            if not upstream.running:
                continue
            if upstream.era == "modern" and method == "notifications/roots/list_changed":
                continue  # 2026-07-28 servers ask for roots inside each call; nothing to tell them
            try:
                await upstream.notify(method or "", frame.get("params"))
            except UpstreamDown:
                log.warning("client notification dropped: upstream is down", extra={"method": method})


_TOOLS_CALL = jsonrpc.raw("tools/call")


def _in_era(client: Client, reply: Frame) -> Frame:
    """A result the proxy made, as the client's revision defines it: a session-era client's has
    none of the fields only 2026-07-28 defines (`resultType` above all)."""
    return reply if client.modern else complete_for_legacy(reply)


def removed_in_modern(method: str, version: str | None) -> str | None:
    """Why a 2026-07-28 request for a method that revision removed (ping, logging/setLevel,
    resources/subscribe, ...) is refused, on every transport; None when the method exists."""
    if method not in eras.HANDSHAKE_ONLY_METHODS:
        return None
    return f"{method} is not part of MCP {version}: the 2026-07-28 revision has no handshake or session"


def _string(params: dict[str, msgspec.Raw], key: str, method: str) -> str:
    value = jsonrpc.decode_any(params[key]) if key in params else None
    if not isinstance(value, str):
        raise jsonrpc.MessageError(jsonrpc.INVALID_PARAMS, f"{method} needs a string {key!r}")
    return value


def _arguments(params: dict[str, msgspec.Raw]) -> Any:
    return jsonrpc.decode_any(params["arguments"]) if "arguments" in params else {}
