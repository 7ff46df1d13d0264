"""RootSets: a connection per root set of a session-era upstream that many clients share,
against fake session-era upstreams (each connection a new one, as a new process would be)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from frugal_proxy.bridge.root_sets import RootSets, key_of
from frugal_proxy.errors import BridgeError
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import UpstreamBase
from tests.fake_peers import FakeUpstream
from tests.pace import deadline

pytestmark = pytest.mark.anyio

A = [{"uri": "file:///data/a", "name": "a"}]
B = [{"uri": "file:///data/b", "name": "b"}]
C = [{"uri": "file:///data/c", "name": "c"}]
DECLARED = {"roots": {"listChanged": True}}


class Closing(FakeUpstream):
    """A fake session-era upstream that says when it has been shut down."""

    def __init__(self) -> None:
        super().__init__("fs", era="legacy")
        self.closed = anyio.Event()

    async def shutdown(self) -> None:
        await super().shutdown()
        self.closed.set()


class Pool:
    """A RootSets whose connections are fake upstreams, every one of them kept for the test."""

    def __init__(self) -> None:
        self.made: list[Closing] = []
        self.attached: list[tuple[Frame, UpstreamBase]] = []
        self.heard = anyio.Event()

    def connect(self) -> UpstreamBase:
        self.made.append(Closing())
        return self.made[-1]

    async def attach(self, frame: Frame, upstream: UpstreamBase) -> None:
        self.attached.append((frame, upstream))
        self.heard.set()

    async def notify(self, upstream: UpstreamBase, frame: Frame) -> None:
        pass


@asynccontextmanager
async def pool(**options: Any) -> AsyncIterator[tuple[RootSets, Pool]]:
    fakes = Pool()
    with deadline(10):
        async with anyio.create_task_group() as tg:
            yield RootSets("fs", fakes.connect, tg, attach=fakes.attach, notify=fakes.notify, **options), fakes
            tg.cancel_scope.cancel()


async def roots_held(upstream: UpstreamBase) -> Any:
    assert isinstance(upstream, FakeUpstream)
    reply = await upstream.ask("roots/list", {})
    return jsonrpc.decode_any(reply["result"])["roots"]


async def test_each_root_set_has_a_connection_of_its_own_that_holds_only_its_roots() -> None:
    async with pool() as (sets, fakes):
        first = await sets.acquire(A, DECLARED)
        again = await sets.acquire(list(reversed(A)), DECLARED)
        other = await sets.acquire(B, DECLARED)
        assert first.connection is again.connection and other.connection is not first.connection
        assert len(fakes.made) == len(sets) == 2
        assert await roots_held(first.connection) == A and await roots_held(other.connection) == B
        # Initialized declaring what the clients declared, roots among them.
        assert fakes.made[0].last("initialize").params["capabilities"] == DECLARED
        # What else the upstream asks goes to the held calls on that connection.
        assert isinstance(other.connection, FakeUpstream)
        async with anyio.create_task_group() as tg:
            tg.start_soon(other.connection.ask, "sampling/createMessage", {})
            await fakes.heard.wait()
            tg.cancel_scope.cancel()
        assert fakes.attached[0][1] is other.connection


async def test_other_capabilities_with_the_same_roots_get_another_connection() -> None:
    assert key_of(A + B, DECLARED) == key_of(B + A + A, DECLARED)
    assert key_of(A, DECLARED) != key_of(A, {**DECLARED, "sampling": {}})
    async with pool() as (sets, _fakes):
        plain = await sets.acquire(A, DECLARED)
        sampling = await sets.acquire(A, {**DECLARED, "sampling": {}})
        assert plain.connection is not sampling.connection


async def test_at_the_limit_the_least_recently_used_idle_connection_makes_room() -> None:
    async with pool(limit=2) as (sets, fakes):
        for roots in (A, B, A):
            (await sets.acquire(roots, DECLARED)).release()
        await sets.acquire(C, DECLARED)
        a, b, c = fakes.made
        assert len(sets) == 2
        await b.closed.wait()  # B was used least recently: it is closed
        assert a.running and c.running


async def test_at_the_limit_with_every_connection_busy_a_new_root_set_is_refused() -> None:
    async with pool(limit=1) as (sets, fakes):
        busy = await sets.acquire(A, DECLARED)
        with pytest.raises(BridgeError) as refused:
            await sets.acquire(B, DECLARED)
        assert "already has 1 connections" in str(refused.value) and "retry once a call has ended" in str(refused.value)
        assert len(fakes.made) == 1 and busy.connection.running  # never another roots' connection
        busy.release()
        assert (await sets.acquire(B, DECLARED)).connection is not busy.connection


async def test_a_connection_idle_for_the_idle_time_is_closed() -> None:
    async with pool(idle=0.05) as (sets, fakes):
        carrier = await sets.acquire(A, DECLARED)
        (await sets.acquire(B, DECLARED)).release()
        await fakes.made[1].closed.wait()
        assert len(sets) == 1 and carrier.connection.running  # a call is still under way on it
        carrier.release()
        await fakes.made[0].closed.wait()
        assert len(sets) == 0


async def test_a_refused_initialize_fails_the_call_and_keeps_no_connection() -> None:
    async def refuse(call: Any) -> Frame:
        return jsonrpc.error(None, jsonrpc.INVALID_PARAMS, "no such version")

    fakes = Pool()

    def refusing() -> UpstreamBase:
        upstream = fakes.connect()
        assert isinstance(upstream, FakeUpstream)
        upstream.handlers["initialize"] = refuse
        return upstream

    with deadline(10):
        async with anyio.create_task_group() as tg:
            sets = RootSets("fs", refusing, tg, attach=fakes.attach, notify=fakes.notify)
            with pytest.raises(BridgeError, match="refused the initialize"):
                await sets.acquire(A, DECLARED)
            assert len(sets) == 0
            tg.cancel_scope.cancel()


async def test_a_connection_still_opening_is_busy_not_idle_at_the_limit() -> None:
    """While the connection for A is being opened, a call for B at the limit finds every
    connection busy and is refused; it never closes A's under A's call."""
    gate = anyio.Event()
    made = anyio.Event()

    class SlowStart(Closing):
        async def __aenter__(self) -> UpstreamBase:
            made.set()
            await gate.wait()
            return await super().__aenter__()

    fakes = Pool()

    def connect() -> UpstreamBase:
        fakes.made.append(SlowStart())
        return fakes.made[-1]

    with deadline(10):
        async with anyio.create_task_group() as tg:
            sets = RootSets("fs", connect, tg, attach=fakes.attach, notify=fakes.notify, limit=1)
            got: list[Any] = []
            done = anyio.Event()

            async def first() -> None:
                got.append(await sets.acquire(A, DECLARED))
                done.set()

            tg.start_soon(first)
            await made.wait()
            with pytest.raises(BridgeError, match="already has 1 connections"):
                await sets.acquire(B, DECLARED)
            gate.set()
            await done.wait()
            assert await roots_held(got[0].connection) == A
            assert not fakes.made[0].closed.is_set() and len(fakes.made) == 1
            tg.cancel_scope.cancel()
