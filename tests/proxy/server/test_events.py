"""Event logs for SSE resumption, without sockets: numbering, the bound, a lagging reader,
and what a `Last-Event-ID` may name."""

from __future__ import annotations

import anyio
import pytest

from frugal_proxy.server.events import EventLog, EventLogs

pytestmark = pytest.mark.anyio


async def test_a_reader_that_falls_behind_skips_what_was_evicted_and_never_repeats() -> None:
    stream = EventLog("1", keep=3)
    for n in range(1, 4):
        stream.append(f"e{n}".encode())
    seen: list[tuple[int, bytes]] = []
    async for number, data in stream.follow(0):
        seen.append((number, data))
        if number == 1:  # while the reader is busy writing event 1, four more arrive
            for n in range(4, 8):
                stream.append(f"e{n}".encode())
            stream.close()
    assert seen == [(1, b"e1"), (5, b"e5"), (6, b"e6"), (7, b"e7")]  # 2-4 evicted, nothing twice


async def test_follow_waits_for_new_events_until_closed() -> None:
    stream = EventLog("0")
    got: list[int] = []

    async def read() -> None:
        async for number, _ in stream.follow(0):
            got.append(number)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        stream.append(b"a")
        await anyio.wait_all_tasks_blocked()
        stream.append(b"b")
        stream.close()
    assert got == [1, 2]


def test_last_event_id_names_only_events_the_session_holds() -> None:
    logs = EventLogs()
    request = logs.open()
    request.append(b"x")
    assert logs.resume(f"{request.stream_id}-1") == (request, 1)
    assert logs.resume(f"{request.stream_id}-0") == (request, 0)
    for bad in [f"{request.stream_id}-2", "9-1", "nonsense", f"{request.stream_id}-\u00b2", "1-" + "9" * 5000, ""]:
        assert logs.resume(bad) is None, bad


def test_finished_request_logs_beyond_the_bound_are_forgotten() -> None:
    logs = EventLogs(kept=2)
    opened = [logs.open() for _ in range(4)]
    for stream in opened:
        stream.close()
    logs.open()  # forgetting happens as new streams open
    assert logs.resume(f"{opened[0].stream_id}-0") is None
    assert logs.resume(f"{opened[3].stream_id}-0") is not None
