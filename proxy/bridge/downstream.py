"""The client's side of a connection: what the proxy sends to the client, and the
server-to-client requests it makes of a session-era client (with ids of its own)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame, RequestId

log = logging.getLogger("frugal_proxy.downstream")


class FrameSender(Protocol):
    """Whatever carries messages to the client: stdout's FrameWriter, or an HTTP session's stream."""

    async def send(self, frame: Frame | list[Frame]) -> None: ...


class ClientGone(Exception):
    """The client closed its side before answering."""


class ClientUnreachable(ClientGone):
    """The client cannot be asked anything (a session-era client without a session); the
    message says why."""


@dataclass(eq=False)
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: Frame | None = None


class DownstreamPeer:
    def __init__(self, writer: FrameSender) -> None:
        self._writer = writer
        self._hold: Callable[[], None] | None = getattr(writer, "hold", None)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        # Listen streams that have a stream of their own (over HTTP), by subscription id.
        self.listeners: dict[RequestId, Callable[[Frame], Awaitable[None]]] = {}

    async def send(self, frame: Frame | list[Frame]) -> None:
        if self.listeners and isinstance(frame, dict):
            sink = self.listeners.get(_subscription_of(frame))
            if sink is not None:
                await sink(frame)
                return
        try:
            await self._writer.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
            log.info("client went away; a message to it was dropped")

    def hold(self) -> None:
        """More messages to the client follow in this loop turn: where its writer can, they go
        out together when the turn ends (stdout's FrameWriter; a no-op elsewhere)."""
        if self._hold is not None:
            self._hold()

    async def request(self, method: str, params: Any) -> Frame:
        """Ask the client something (sampling, elicitation, roots) and wait for its reply."""
        ident = next(self._ids)
        pending = _Pending()
        self._pending[ident] = pending
        try:
            await self._writer.send(jsonrpc.request(ident, method, params))
            await pending.done.wait()
        except anyio.get_cancelled_exc_class():
            if self._pending.pop(ident, None) is not None:
                with anyio.CancelScope(shield=True):
                    await self.send(
                        jsonrpc.notification(
                            "notifications/cancelled", {"requestId": ident, "reason": "no longer needed"}
                        )
                    )
            raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError):
            self._pending.pop(ident, None)
            raise ClientGone from None
        except ClientUnreachable:
            self._pending.pop(ident, None)
            raise
        if pending.reply is None:
            raise ClientGone
        return pending.reply

    def take_reply(self, frame: Frame) -> bool:
        """Deliver a client's reply to the request waiting for it; False if nobody is."""
        ident = jsonrpc.id_of(frame)
        pending = self._pending.pop(ident, None) if isinstance(ident, int) else None
        if pending is None:
            return False
        pending.reply = frame
        pending.done.set()
        return True

    def close(self) -> None:
        """The client is gone: release everything still waiting on it."""
        for pending in self._pending.values():
            pending.done.set()
        self._pending.clear()


def _subscription_of(frame: Frame) -> Any:
    """The listen stream a notification is tagged for, if any."""
    meta = jsonrpc.sub_object(jsonrpc.params_of(frame), "_meta")
    raw = meta.get(eras.META_SUBSCRIPTION_ID)
    try:
        return None if raw is None else jsonrpc.decode_any(raw)
    except jsonrpc.MessageError:
        return None
