"""Event logs for SSE resumption, without sockets: numbering, the bounds (events, bytes, finished
streams, time), a lagging reader, a cut, and what a `Last-Event-ID` may name."""

from __future__ import annotations

import re

import anyio
import pytest

from frugal_proxy.server.events import Cut, EventLog, EventLogs, Unresumable
from tests.pace import deadline

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
    said = {
        f"{request.stream_id}-2": "has not sent (its newest is 1-1)",
        "9-1": "names stream 9, which this session never opened or no longer holds",
        "nonsense": "is not an event id of this server",
        f"{request.stream_id}-\u00b2": "is not an event id of this server",
        "1-" + "9" * 5000: "has not sent",
        "": "is not an event id of this server",
        "x-1": "is not an event id of this server",
    }
    for bad, why in said.items():
        with pytest.raises(Unresumable, match=re.escape(why)):
            logs.resume(bad)


def test_finished_request_logs_beyond_the_bound_are_forgotten() -> None:
    logs = EventLogs(kept=2)
    opened = [logs.open() for _ in range(4)]
    for stream in opened:
        stream.close()
    logs.open()  # forgetting happens as new streams open
    with pytest.raises(Unresumable, match="no longer holds"):
        logs.resume(f"{opened[0].stream_id}-0")
    assert logs.resume(f"{opened[3].stream_id}-0") == (opened[3], 0)


def test_a_stream_keeps_its_newest_events_within_its_byte_bound_and_always_its_reply(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = EventLog("1", keep_bytes=10)
    for data in (b"aaaa", b"bbbb", b"cccc"):
        stream.append(data)
    assert (stream.first, stream.last, stream.size) == (2, 3, 8)  # a+b+c is 12 bytes: a is dropped
    (warned,) = [record for record in caplog.records if record.levelname == "WARNING"]
    assert "oldest undelivered messages were dropped" in warned.getMessage() and warned.dropped == 1
    stream.written(3)
    reply = b"r" * 50  # larger than the whole bound: kept alone
    stream.append(reply)
    assert (stream.first, stream.last, stream.size) == (4, 4, 50)
    assert len([record for record in caplog.records if record.levelname == "WARNING"]) == 1  # 2, 3 were delivered


async def test_a_reader_resumes_after_events_the_byte_bound_dropped_without_repeats() -> None:
    stream = EventLog("1", keep_bytes=6)
    for n in range(1, 6):
        stream.append(b"ev%d" % n)  # 3 bytes each: two held
    stream.close()
    assert [number async for number, _ in stream.follow(0)] == [4, 5]


def test_finished_logs_are_forgotten_past_the_sessions_byte_bound_but_the_newest_is_kept() -> None:
    logs = EventLogs(kept_bytes=100)
    done = []
    for _ in range(3):
        stream = logs.open()
        stream.append(b"x" * 60)
        stream.close()
        done.append(stream)
    logs.open()
    for gone in done[:2]:  # 180 bytes held: the two oldest go, the newest stays though alone it fits
        with pytest.raises(Unresumable, match="no longer holds"):
            logs.resume(f"{gone.stream_id}-1")
    assert logs.resume(f"{done[2].stream_id}-1") == (done[2], 1)
    big = logs.open()
    big.append(b"y" * 500)  # over the session's bound by itself
    big.close()
    logs.open()
    assert logs.resume(f"{big.stream_id}-1") == (big, 1)  # the newest finished one is never forgotten for its size


def test_a_finished_log_can_be_resumed_for_its_window_then_is_forgotten() -> None:
    now = [1000.0]
    logs = EventLogs(resume_seconds=300, clock=lambda: now[0])
    stream = logs.open()
    stream.append(b"reply")
    stream.close()
    now[0] += 299
    assert logs.resume(f"{stream.stream_id}-0") == (stream, 0)
    open_one = logs.open()  # a stream still open is never forgotten, however old
    now[0] += 2
    with pytest.raises(Unresumable, match="a finished stream is kept 300 s"):
        logs.resume(f"{stream.stream_id}-0")
    now[0] += 10_000
    assert logs.resume(f"{open_one.stream_id}-0") == (open_one, 0)


async def test_a_cut_ends_a_reader_at_the_event_it_names_and_the_next_reader_gets_the_rest() -> None:
    stream = EventLog("3")
    stream.append(b"a")
    cut = Cut()
    got: list[int] = []

    async def read() -> None:
        async for number, _ in stream.follow(0, cut):
            got.append(number)

    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            cut.at = stream.last
            stream.nudge()  # the reader ends although the log stays open
    assert got == [1] and not stream.closed
    stream.append(b"b")
    stream.close()
    assert [number async for number, _ in stream.follow(1)] == [2]
