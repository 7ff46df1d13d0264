"""A plain tools/call on its way, and the error that answers a request whose serving failed.

A plain call (Router._plain_call for the stdio client, Router.open_plain over HTTP) is one
upstream's own tool, both sides in the session era or passed through as they are, and no
per-call policy hooks: it goes upstream from the client's reader (or the request's task) and is
answered from the upstream's reader, with no task, cancel scope or timer of its own. `PlainCall`
is its state in the router's in-flight table; the router keeps the link, the deadlines and the
pipeline it uses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import anyio.abc

from frugal_proxy.bridge.downstream import DownstreamPeer
from frugal_proxy.bridge.link import UpstreamLink
from frugal_proxy.errors import BridgeError, ProxyError, UpstreamDown, UpstreamError
from frugal_proxy.pipeline.pipeline import Pipeline
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId
from frugal_proxy.providers.mcp_tool import fault_outcome
from frugal_proxy.records import Exchange, Outcome, ProviderSpec
from frugal_proxy.router.answerers import Deadlines
from frugal_proxy.router.catalog import CatalogError
from frugal_proxy.transports.lines import SMALL_MESSAGE
from frugal_proxy.upstream.base import Pending

log = logging.getLogger("frugal_proxy.session")  # the router's: one logger for a session's requests


class Host(Protocol):
    """What a plain call uses of its router (router.Router)."""

    pipeline: Pipeline
    downstream: DownstreamPeer
    _plain_link: UpstreamLink | None  # the one upstream's link, when there is one
    _plain_spec: ProviderSpec | None  # its provider in the pipeline
    _inflight: dict[RequestId, anyio.CancelScope | PlainCall]
    _idle: anyio.Event  # set when the in-flight table empties (`drain` waits on it)
    _deadlines: Deadlines
    _tg: anyio.abc.TaskGroup

    def _in_clients_era(self, exchange: Exchange, reply: Frame) -> Frame: ...


class PlainCall:
    """A plain tools/call on its way (Router._plain_call, Router.open_plain), in the router's
    in-flight table until it is answered or cancelled. The upstream's reader settles it and
    writes the reply (to the stdio client, or to `on_reply`); a result too large to govern at
    once is governed on a task, so that the reader goes on. The client's cancellation withdraws
    it upstream (it went out whole before it was taken here); the link's deadline ends it as
    `forward` would (cancelled upstream, the timeout in the reply)."""

    __slots__ = ("client_id", "done", "due", "exchange", "frame", "link", "on_reply", "pending", "router", "started")

    def __init__(
        self,
        router: Host,
        frame: Frame,
        exchange: Exchange,
        on_reply: Callable[[Frame | None], object] | None = None,
    ) -> None:
        assert router._plain_link is not None
        self.router = router
        self.link = router._plain_link
        self.frame = frame
        self.exchange = exchange
        self.on_reply = on_reply
        self.client_id = exchange.call.request_id
        self.pending: Pending | None = None
        self.due = 0.0  # the loop time its link's deadline runs out at, when it has one
        self.started = 0.0
        self.done = False
        router._inflight[self.client_id] = self

    def begin(self, spec: ProviderSpec | None) -> bool:
        """After `Pipeline.open` named `spec`: send the call upstream (True: under way, or
        cancelled meanwhile), or take it out of the table when more is to be done (False)."""
        if self.done:
            return True  # cancelled (or drained) while the pipeline opened it: nothing goes upstream
        router, link = self.router, self.link
        if spec is not None and spec is router._plain_spec:
            self.started = time.monotonic()
            self.pending = link.start("tools/call", self.exchange.call.params, self.settled, self.exchange.on_progress)
            if self.pending is not None:
                if link.deadline is not None:
                    router._deadlines.watch(self, link.deadline)
                return True
        self.release()
        return False

    def release(self) -> None:
        """Out of the in-flight table, which tells `drain` when it has emptied. The Pending goes
        too: it holds `settled` (this call) as its `on_settled`, and that cycle would leave every
        call's objects, its exchange and answer included, to the garbage collector (about 30 µs
        a call in collections, measured), where without it they are freed as the call ends."""
        self.done = True
        self.pending = None
        self.router._deadlines.unwatch(self)
        inflight = self.router._inflight
        if inflight.get(self.exchange.call.request_id) is self:
            del inflight[self.exchange.call.request_id]
            if not inflight:
                self.router._idle.set()

    def cancel(self) -> None:
        """The client cancelled it, or the router is shutting down: no reply, and withdrawn
        upstream before it leaves the in-flight table (so `drain` waits for that)."""
        if self.done:
            return
        self.done = True
        self.router._deadlines.unwatch(self)
        self.router._tg.start_soon(self._withdraw)
        if self.on_reply is not None:
            self.on_reply(None)

    async def _withdraw(self) -> None:
        try:
            with anyio.CancelScope(shield=True):
                if self.pending is not None:
                    self._reached(self.pending)
                    await self.link.upstream.withdraw(self.pending, "cancelled by the client")
                    await self._sent_and_cancelled()
        finally:
            self.release()

    def _reached(self, pending: Pending) -> None:
        """How far the call got, for dispatch to tell whether a paid one may have billed: it went
        out once the upstream's pipe was handed it."""
        self.exchange.request_state = "sent" if pending.sent else "unsent"

    async def _sent_and_cancelled(self) -> None:
        """A paid tool may have billed a call that was sent: its receipt and ledger line say so."""
        spec = self.router._plain_spec
        assert spec is not None
        try:
            await self.router.pipeline.cancelled(self.exchange, spec, self.started)
        except Exception:
            log.exception("sealing a cancelled call failed", extra={"tool": self.exchange.call.tool})

    def expire(self) -> None:
        if not self.done:
            self.done = True
            self.router._tg.start_soon(self._expired)

    async def _expired(self) -> None:
        assert self.pending is not None
        self._reached(self.pending)
        with anyio.CancelScope(shield=True):
            await self.link.upstream.withdraw(self.pending, "the proxy's deadline for the call ran out")
        await self._answer(fault_outcome(self.link.timed_out("tools/call")))

    async def settled(self, pending: Pending) -> None:
        """The reply (or the failure) is in; called by the upstream's reader."""
        if self.done:
            return
        self.done = True
        self.router._deadlines.unwatch(self)
        if isinstance(pending.failure, UpstreamError):
            self._reached(pending)  # the upstream died (or refused) with it unanswered
            outcome = fault_outcome(pending.failure)
        else:
            assert pending.reply is not None
            outcome = Outcome("ok", reply=pending.reply)
            result = pending.reply.get("result")
            if result is not None and len(result) > SMALL_MESSAGE:
                self.router._tg.start_soon(self._answer, outcome)  # the governor may take a while
                return
        await self._answer(outcome)

    async def _answer(self, outcome: Outcome) -> None:
        """The answer goes to the client first, then the exchange is sealed (the client does not
        wait for the ledger), then the call leaves the in-flight table (`drain` waits for the
        seal). An answer that fails is an error reply, unsealed, as `Pipeline.run` leaves it."""
        router, exchange = self.router, self.exchange
        client_id = exchange.call.request_id
        assert router._plain_spec is not None
        try:
            reply = router._in_clients_era(
                exchange, await router.pipeline.answer(exchange, router._plain_spec, outcome, self.started)
            )
        except Exception as exc:
            self.release()
            await self.send(jsonrpc.with_id(error_reply(client_id, self.frame, exc), client_id))
            return
        except BaseException:  # cancelled while governing (the router's task group is ending)
            self.release()
            if self.on_reply is not None:
                self.on_reply(None)
            raise
        try:
            await self.send(jsonrpc.with_id(reply, client_id))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._seal()
            raise
        await self._seal()

    async def send(self, reply: Frame) -> None:
        """To the stdio client, or to `on_reply` (an HTTP response waits on it)."""
        if self.on_reply is not None:
            self.on_reply(reply)
        else:
            await self.router.downstream.send(reply)

    async def _seal(self) -> None:
        try:
            await self.router.pipeline.seal(self.exchange)
        except Exception:
            log.exception("sealing a call failed after its answer was sent", extra={"tool": self.exchange.call.tool})
        finally:
            self.release()


def error_reply(client_id: RequestId, frame: Frame, exc: Exception) -> Frame:
    """The JSON-RPC error answering a request whose serving raised `exc`."""
    if isinstance(exc, jsonrpc.MessageError):
        log.warning(
            "client request refused",
            extra={"method": jsonrpc.method_of(frame), "code": exc.code, "reason": str(exc)[:200]},
        )
        return jsonrpc.error(client_id, exc.code, str(exc), _error_data(exc))
    if isinstance(exc, BridgeError):
        log.warning("bridging failed", extra={"reason": str(exc)[:200]})
        return jsonrpc.error(client_id, exc.code, str(exc))
    if isinstance(exc, CatalogError):
        return jsonrpc.error(client_id, jsonrpc.INVALID_PARAMS, str(exc))
    if isinstance(exc, UpstreamDown | ProxyError):
        return jsonrpc.error(client_id, jsonrpc.INTERNAL_ERROR, str(exc))
    log.exception("internal error while serving a request", exc_info=exc)
    return jsonrpc.error(client_id, jsonrpc.INTERNAL_ERROR, f"internal error in frugal-proxy: {type(exc).__name__}")


def _error_data(exc: jsonrpc.MessageError) -> Any:
    data = getattr(exc, "data", None)
    return data() if callable(data) else None
