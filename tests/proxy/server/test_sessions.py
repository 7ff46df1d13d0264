"""Session-era HTTP sessions over fake upstreams: each its own Router and upstream connections,
counted while opening, ended one by one or all at once (their upstreams shut down), expired
when idle and not busy; what the proxy sends a client unasked waits in the session's outbox."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.server.sessions import HttpSessions, UpstreamSet
from frugal_proxy.upstream.base import UpstreamBase
from tests.fake_peers import FakeUpstream
from tests.pace import deadline

pytestmark = pytest.mark.anyio


class Made:
    """The upstream factory of an UpstreamSet, keeping every connection it made."""

    def __init__(self) -> None:
        self.upstreams: list[FakeUpstream] = []

    def __call__(self) -> list[UpstreamBase]:
        self.upstreams.append(FakeUpstream(f"up{len(self.upstreams)}", era="legacy"))
        return [self.upstreams[-1]]


@asynccontextmanager
async def sessions(made: Made, idle_timeout: float = 60) -> AsyncIterator[HttpSessions]:
    with deadline(5):
        async with anyio.create_task_group() as tg:
            yield HttpSessions(tg, UpstreamSet(made), idle_timeout=idle_timeout, max_sessions=10)
            tg.cancel_scope.cancel()


async def test_each_session_has_its_own_started_upstreams_until_it_ends() -> None:
    made = Made()
    async with sessions(made) as live:
        first, second = await live.open(), await live.open()
        assert len(live) == 2 and first.id != second.id and live.get(first.id) is first
        assert first.session is not second.session
        assert [up.running for up in made.upstreams] == [True, True]  # started with the session
        assert [link.upstream for link in first.session.links] == [made.upstreams[0]]
        assert live.end(first.id) and not live.end(first.id)
        assert live.get(first.id) is None and len(live) == 1
        await live.end_all()
        assert len(live) == 0
    assert [up.running for up in made.upstreams] == [False, False]  # each shut down when it ended


async def test_idle_sessions_expire_unless_busy() -> None:
    made = Made()
    async with sessions(made, idle_timeout=0.05) as live, anyio.create_task_group() as tg:
        idle, busy = await live.open(), await live.open()
        busy.busy = 1
        tg.start_soon(live.expire_idle)
        await idle.ended.wait()
        assert live.get(idle.id) is None and live.get(busy.id) is busy
        tg.cancel_scope.cancel()


async def test_what_a_client_is_sent_unasked_waits_in_its_outbox() -> None:
    async with sessions(Made()) as live:
        entry = await live.open()
        await entry.peer.send(jsonrpc.notification("notifications/tools/list_changed", {}))
        standalone = entry.outbox.events.standalone
        assert standalone.last == 1
        entry.outbox.close()
        events = [data async for _, data in standalone.follow(0)]
    assert [jsonrpc.method_of(jsonrpc.decode_frames(data)[0][0]) for data in events] == [
        "notifications/tools/list_changed"
    ]


async def test_a_session_is_counted_once_while_it_opens() -> None:
    seen: list[int] = []
    async with sessions(Made()) as live, anyio.create_task_group() as tg:
        opened = anyio.Event()

        async def watch() -> None:  # what a request checking the bound sees, loop turn after loop turn
            while not opened.is_set():
                seen.append(len(live))
                await anyio.lowlevel.checkpoint()

        async def open_one() -> None:
            await live.open()
            opened.set()

        tg.start_soon(watch)
        tg.start_soon(open_one)
        await opened.wait()
        assert len(live) == 1
        await live.end_all()
    assert max(seen) == 1, seen
