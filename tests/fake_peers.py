"""The peers an UpstreamLink sits between, faked: an upstream connection whose server is a few
Python handlers, and a client that answers the proxy's requests from a dict.

`FakeUpstream` is an `UpstreamBase`: what the links and the router see of it (era negotiation,
the initialize replay, `ensure_ready`, the routing of what the server sends unasked, the down
state) is the real shared code; only the wire is replaced. Requests reach a handler decoded,
and what it returns is the result (a `Frame` goes back as it is). Without a handler of its own
a method gets a small server's answer: `initialize` (session era only), `tools/list` and
`tools/call` (an echo of the name and arguments); anything else is -32601. A `dual` server
answers `server/discover` and `initialize`, and keeps the era of the first one it gets, as the
SDK's do over stdio (it is probed on the wire, so the probe shows in `calls`).

    upstream = FakeUpstream("notes", era="legacy", tools=[tool("add")])
    upstream.handlers["tools/call"] = slow_call        # async (FakeCall) -> result or Frame
    await upstream.ask("sampling/createMessage", {})  # a server request, answered by the link
    upstream.refuse("it crashed")                     # down: requests raise UpstreamDown

`FakeClient` is what the proxy sends a client (a FrameSender behind a real DownstreamPeer);
`linked` puts links to some fake upstreams in a task group, as a Router would.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import msgspec

from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import CutHandler, ProgressHandler, RelatedHandler, UpstreamBase, discovered
from tests.pace import deadline


def tool(name: str, **extra: Any) -> dict[str, Any]:
    """A tools/list entry."""
    return {"name": name, "description": f"the {name} tool", "inputSchema": {"type": "object"}, **extra}


def decoded(value: Any) -> Any:
    """Params as plain JSON values, whatever mix of `msgspec.Raw` and Python values they are."""
    return None if value is None else msgspec.json.decode(jsonrpc.encode(value))


@dataclass
class FakeCall:
    """One request as the fake server got it."""

    method: str
    params: dict[str, Any]
    upstream_id: int
    on_progress: ProgressHandler | None = None
    on_related: RelatedHandler | None = None
    headers: Mapping[str, str] | None = None  # the client's, where they go on with the request
    on_cut: CutHandler | None = None  # what an HTTP server's mid-call close of its stream tells

    async def progress(self, value: float) -> None:
        """Report progress as a server does: tagged with the request's (mapped) token."""
        assert self.on_progress is not None, "the caller asked for no progress"
        token = self.params["_meta"]["progressToken"]
        await self.on_progress({"progressToken": jsonrpc.raw(token), "progress": jsonrpc.raw(value)})


Handler = Callable[[FakeCall], Awaitable[Any]]


@dataclass
class _Asked:
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: Frame | None = None


class FakeUpstream(UpstreamBase):
    def __init__(
        self,
        name: str = "fake",
        *,
        era: Literal["modern", "legacy", "dual"] = "modern",
        tools: list[dict[str, Any]] | None = None,
        capabilities: dict[str, Any] | None = None,
        instructions: str | None = None,
        cache: tuple[int, str] = (0, "private"),
    ) -> None:
        super().__init__(name=name, probe_timeout=1.0)
        self.speaks = era
        self.tools = tools if tools is not None else [tool("echo")]
        self.server_capabilities = capabilities if capabilities is not None else {"tools": {}}
        self.instructions = instructions
        self.cache = cache  # a modern server's ttlMs and cacheScope
        self.handlers: dict[str, Handler] = {}
        self.calls: list[FakeCall] = []
        self.notifications: list[tuple[str, Any]] = []
        self.replies: list[Frame] = []
        self.cancelled: list[str] = []
        self.on_notify: Callable[[str, Any], Awaitable[None]] | None = None  # the server hearing a notification
        self._up = False
        self._refusal: str | None = None
        self._asked: dict[int, _Asked] = {}
        self._server_ids = itertools.count(9001)
        self.locked: str | None = None  # the era a dual server took from its first request

    # -- what the tests see ----------------------------------------------------------------------

    def methods(self) -> list[str]:
        return [call.method for call in self.calls]

    def last(self, method: str) -> FakeCall:
        return next(call for call in reversed(self.calls) if call.method == method)

    def refuse(self, reason: str) -> None:
        """Go down and stay down: requests raise UpstreamDown naming the reason."""
        self._up = False
        self._refusal = reason
        self._record_down(reason, [], at_least=3600)

    async def ask(self, method: str, params: Any = None) -> Frame:
        """Send the client a request (sampling, elicitation, roots) and wait for its answer."""
        ident = next(self._server_ids)
        asked = self._asked[ident] = _Asked()
        await self._deliver(jsonrpc.request(ident, method, params), {})
        await asked.done.wait()
        assert asked.reply is not None
        return asked.reply

    async def tell(self, method: str, params: Any = None) -> None:
        """Send a notification, as the server would unasked."""
        await self._deliver(jsonrpc.notification(method, params), {})

    # -- UpstreamBase ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._up

    async def _start(self) -> None:
        if self._refusal is not None:
            self._record_down(self._refusal, [], at_least=3600)
            raise self._down_error()
        self._up = True
        self.generation += 1
        if self.follows_client or self.speaks == "dual":
            await self._negotiate()
        else:
            await self._settle(self._discover_result() if self.speaks == "modern" else None)

    async def _discover(self) -> dict[str, Any] | None:
        return discovered(await self.request("server/discover", UpstreamBase.discover_params()))

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
        if not self._up:
            raise self._down_error()
        upstream_id = next(self._ids)
        body = decoded(params) or {}
        if on_progress is not None and "progressToken" in body.get("_meta", {}):
            body["_meta"]["progressToken"] = upstream_id  # the mapping UpstreamBase._open does
        call = FakeCall(method, body, upstream_id, on_progress, on_related, headers, on_cut)
        self.calls.append(call)
        try:
            answer = await self.handlers.get(method, self._default)(call)
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(method)
            raise
        if isinstance(answer, dict) and any(isinstance(answer.get(key), msgspec.Raw) for key in ("result", "error")):
            return jsonrpc.with_id(answer, upstream_id)  # a Frame: sent as it is
        return jsonrpc.result(upstream_id, answer)

    async def notify(self, method: str, params: Any = None) -> None:
        if not self._up:
            raise self._down_error()
        self.notifications.append((method, decoded(params)))
        if self.on_notify is not None:
            await self.on_notify(method, params)

    async def send_reply(self, frame: Frame) -> None:
        self.replies.append(frame)
        ident = jsonrpc.id_of(frame)
        asked = self._asked.pop(ident, None) if isinstance(ident, int) else None
        if asked is not None:
            asked.reply = frame
            asked.done.set()

    async def shutdown(self) -> None:
        self._up = False

    def state(self) -> dict[str, object]:
        return {"state": "up", "era": self.era} if self._up else self._down_state()

    # -- the small server ------------------------------------------------------------------------

    def _discover_result(self) -> dict[str, Any]:
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(eras.MODERN_VERSIONS),
            "capabilities": self.server_capabilities,
            "_meta": {eras.META_SERVER_INFO: {"name": self.name, "version": "1.0"}},
            "ttlMs": self.cache[0],
            "cacheScope": self.cache[1],
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return result

    async def _default(self, call: FakeCall) -> Any:
        if self.speaks == "dual" and self.locked is None and call.method in ("initialize", "server/discover"):
            self.locked = "legacy" if call.method == "initialize" else "modern"
        if call.method == "server/discover" and "legacy" not in (self.speaks, self.locked):
            return self._discover_result()
        if call.method == "initialize" and "modern" in (self.speaks, self.locked):
            data = {"supported": list(eras.MODERN_VERSIONS), "requested": call.params.get("protocolVersion")}
            return jsonrpc.error(None, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, "unsupported version", data)
        if call.method == "initialize" and "legacy" in (self.speaks, self.locked):
            result: dict[str, Any] = {
                "protocolVersion": eras.negotiate_handshake(call.params.get("protocolVersion")),
                "capabilities": self.server_capabilities,
                "serverInfo": {"name": self.name, "version": "1.0"},
            }
            if self.instructions is not None:
                result["instructions"] = self.instructions
            return result
        if call.method == "tools/list":
            return {"tools": self.tools, **self._modern_hints()}
        if call.method == "tools/call":
            text = f"{call.params.get('name')} {jsonrpc.encode(call.params.get('arguments', {})).decode()}"
            return {"content": [{"type": "text", "text": text}], **self._modern_hints(cacheable=False)}
        return jsonrpc.error(None, jsonrpc.METHOD_NOT_FOUND, f"{call.method} not supported")

    def _modern_hints(self, *, cacheable: bool = True) -> dict[str, Any]:
        if "modern" not in (self.speaks, self.locked):
            return {}
        hints: dict[str, Any] = {"resultType": "complete"}
        if cacheable:
            hints.update(ttlMs=self.cache[0], cacheScope=self.cache[1])
        return hints


class FakeClient:
    """The client's side: what the proxy sends it, and its answers to the proxy's requests
    (from `answers`, by method)."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.answers = answers or {}
        self.sent: list[Frame] = []
        self.peer = DownstreamPeer(self)

    async def send(self, frame: Frame | list[Frame]) -> None:
        assert isinstance(frame, dict)
        self.sent.append(frame)
        method = jsonrpc.method_of(frame)
        if jsonrpc.is_request(frame) and method in self.answers:
            self.peer.take_reply(jsonrpc.result(jsonrpc.id_of(frame), self.answers[method]))

    def methods(self) -> list[str | None]:
        return [jsonrpc.method_of(frame) for frame in self.sent]


@asynccontextmanager
async def linked(
    upstreams: list[FakeUpstream], client: Client, downstream: FakeClient | None = None, seconds: float = 5
) -> AsyncIterator[list[UpstreamLink]]:
    """Links from one client to each upstream, alive (with their background tasks) until the end."""
    peer = (downstream or FakeClient()).peer
    with deadline(seconds):
        async with anyio.create_task_group() as tg:
            yield [UpstreamLink(upstream, client, peer, tg) for upstream in upstreams]
            tg.cancel_scope.cancel()
