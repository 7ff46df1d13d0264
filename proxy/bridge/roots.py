"""The roots a 2026-07-28 client granted, for a session-era upstream that asks outside a call.

A session-era server may ask `roots/list` whenever it likes, right after initialize above all
(server-filesystem narrows its directories to the answer, and keeps the wider ones of its
command line when the request fails, and serves whatever arrives before it has asked). A
2026-07-28 client can only be asked inside one of its calls, through `input_required`. So:

- the upstream's roots/list outside a call is never refused: it gets the roots the proxy last
  learnt from the client, or none while it knows none;
- the client's first tools/call, prompts/get or resources/read asks the client's roots first
  (the proxy's own `input_required` round), and goes upstream only after them: once the upstream
  holds them (a server that was answered otherwise gets `notifications/roots/list_changed` and
  is waited for until it asks again), or once an upstream that has not asked is seen not to be
  asking: a server that uses roots asks as soon as it is initialized, before it answers what
  was sent after that, so a `ping` answered with no roots/list before it says it has not asked
  (over stdio, where the upstream's messages arrive in the order it sent them). The wait is
  bounded by the call's own deadline (the link's).

That is one client on the connection (stdio). Where many clients share the link, their roots go
on connections of their own instead, one per root set (bridge.root_sets), and the link's own
connection keeps this object's empty answer.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from frugal_proxy.bridge.mrtr import Question
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import UpstreamBase

log = logging.getLogger("frugal_proxy.bridge")

REASK_WAIT = 5.0  # how long a call waits for the upstream to ask again after list_changed
# MCP has no acknowledgement that a server applied the roots it was given, and servers apply them
# asynchronously (server-filesystem resolves each one on disk first): the call that waited for
# them gives the server this long before it goes up.
APPLY_WAIT = 0.1
ROOTS_CHANGED = "notifications/roots/list_changed"


class GrantedRoots:
    """One modern client's roots as one session-era upstream gets them."""

    def __init__(self, upstream: UpstreamBase) -> None:
        self._upstream = upstream
        self.known: list[Any] | None = None  # the client's roots, once it has given them
        self._held: list[Any] | None = None  # what the upstream was last given (None: nothing yet)
        self._reasked: anyio.Event | None = None  # set when the upstream asks again after list_changed
        self._asked = anyio.Event()  # set when the upstream asks at all
        self._waiting = False  # a call waits for the upstream to ask

    def started(self) -> None:
        """The proxy has just initialized the upstream: it holds no roots yet."""
        self._held = None
        self._asked = anyio.Event()

    @property
    def answers_here(self) -> bool:
        """Whether the upstream's roots/list is the proxy's to answer even during a call: while
        the client's roots are unknown, or a call waits for the upstream to take them."""
        return self.known is None or self._waiting

    def question(self) -> Question | None:
        """The proxy's own roots/list for a roots-capable client's call, until the client has
        given its roots (None when there is nothing to ask)."""
        if self.known is not None:
            return None
        return Question("roots/list", {}, self._own_answer)

    async def answer(self, frame: Frame) -> None:
        """Answer the upstream's roots/list, asked outside any call, with what the client granted."""
        roots = self.known if self.known is not None else []
        self._held = roots
        await self._upstream.send_reply(jsonrpc.result(jsonrpc.id_of(frame), {"roots": roots}))
        self._asked.set()
        if self._reasked is not None:
            self._reasked.set()

    async def delivered(self, reply: Frame) -> None:
        """The client's answer to an upstream's roots/list, which went to the upstream as it is."""
        roots = roots_of(reply)
        if roots is not None:
            self.known = self._held = roots

    async def _own_answer(self, reply: Frame) -> None:
        """The client's answer to the proxy's own roots/list (an error grants nothing); returns
        once the upstream holds them, or has had its chance to ask."""
        roots = roots_of(reply)
        await self.take(roots if roots is not None else [])

    async def take(self, roots: list[Any]) -> None:
        """The client granted `roots`: returns once the upstream holds them, or has had its
        chance to ask."""
        self._waiting = True
        try:
            self.known = roots
            await self._hand_over()
        finally:
            self._waiting = False

    async def _hand_over(self) -> None:
        if self._held is None:
            # Not asked yet. A server that uses roots asks right after initialize, so by the time
            # it answers a ping sent now it has asked (and been answered) or never will.
            if not self._asked.is_set():
                await self._upstream.request("ping")
            if self._asked.is_set():
                await anyio.sleep(APPLY_WAIT)
            return
        if self._held == self.known:
            return
        self._reasked = anyio.Event()
        try:
            await self._upstream.notify(ROOTS_CHANGED)
            with anyio.move_on_after(REASK_WAIT) as waited:
                await self._reasked.wait()
        finally:
            self._reasked = None
        if waited.cancelled_caught:
            log.warning("upstream did not ask for the changed roots", extra={"upstream": self._upstream.name})
        else:
            await anyio.sleep(APPLY_WAIT)


def roots_of(reply: Frame) -> list[Any] | None:
    """The roots in a client's roots/list reply (None for an error or a malformed answer)."""
    if "result" not in reply:
        return None
    body = jsonrpc.decode_any(reply["result"])
    roots = body.get("roots") if isinstance(body, dict) else None
    return roots if isinstance(roots, list) else None
