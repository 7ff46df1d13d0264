"""The endpoint's responses called as ASGI apps, without a server: refusals with the spec's
statuses, a request's own SSE stream (progress, then the reply; closing it cancels the call
unless the session can resume it), and a session's standalone stream."""

from __future__ import annotations

from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest
from starlette.responses import Response

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import ProgressSink, StreamCut
from frugal_proxy.server.events import EventLog
from frugal_proxy.server.sessions import HttpSession, Outbox
from frugal_proxy.server.streams import (
    RECONNECT_MS,
    EventStream,
    ReplyStream,
    prefers_event_stream,
    reply_response,
    rpc_error,
)
from tests.pace import deadline

pytestmark = pytest.mark.anyio

PROGRESS = jsonrpc.notification("notifications/progress", {"progressToken": "t", "progress": 1})
REPLY = jsonrpc.result(7, {"content": []})


class Connection:
    """One HTTP exchange's ASGI side: what the app sends, and a client that may hang up."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.hang_up = anyio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.hang_up.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Any) -> None:
        self.sent.append(dict(message))

    async def run(self, response: Response) -> None:
        with deadline(5):
            await response({"type": "http"}, self.receive, self.send)

    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    def body(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self.sent[1:])


def test_refusals_and_replies_get_the_statuses_of_their_era() -> None:
    refused = rpc_error(400, jsonrpc.HEADER_MISMATCH, "Mcp-Method header does not match", 3)
    assert refused.status_code == 400 and jsonrpc.decode_any(refused.body)["error"]["code"] == jsonrpc.HEADER_MISMATCH
    unknown = jsonrpc.error(3, jsonrpc.METHOD_NOT_FOUND, "no such method")
    assert reply_response(unknown, modern=True).status_code == 404
    assert reply_response(unknown).status_code == 200  # a session-era 404 would mean the session is gone
    assert reply_response(REPLY, {"Mcp-Session-Id": "s"}).headers["mcp-session-id"] == "s"


async def test_a_request_stream_carries_its_progress_then_its_reply() -> None:
    async def answer(stream: ProgressSink, cut: StreamCut) -> Any:
        await stream(PROGRESS)
        return REPLY

    connection = Connection()
    await connection.run(ReplyStream(answer, EventLog("request"), resumable=False))
    headers = connection.headers()
    assert headers[b"content-type"].startswith(b"text/event-stream") and b"content-length" not in headers
    assert headers[b"cache-control"] == b"no-store"
    assert connection.body() == b"".join(
        b"event: message\ndata: " + jsonrpc.encode(frame) + b"\n\n" for frame in (PROGRESS, REPLY)
    )


async def test_closing_a_stream_that_cannot_resume_cancels_the_call() -> None:
    cancelled = anyio.Event()

    async def answer(stream: ProgressSink, cut: StreamCut) -> Any:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    connection = Connection()
    connection.hang_up.set()
    await connection.run(ReplyStream(answer, EventLog("request"), resumable=False))
    assert cancelled.is_set()


async def test_a_resumable_stream_numbers_its_events_and_its_call_outlives_the_connection() -> None:
    go_on = anyio.Event()

    async def answer(stream: ProgressSink, cut: StreamCut) -> Any:
        await stream(PROGRESS)
        await go_on.wait()
        return REPLY

    log = EventLog("4")
    connection = Connection()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.run, ReplyStream(answer, log, resumable=True, prime=True))
            while log.last < 1:
                await anyio.lowlevel.checkpoint()
            connection.hang_up.set()  # the connection breaks before the reply
            await anyio.wait_all_tasks_blocked()
            go_on.set()
    body = connection.body()
    assert body.startswith(b"id: 4-0\nretry: %d\ndata: \n\n" % RECONNECT_MS) and b"id: 4-1\nevent: message" in body
    assert log.last == 2 and log.closed  # the reply waits in the log for Last-Event-ID


class Served(Connection):
    """A connection under a server: once the response is complete, `receive` says the exchange
    is over (as uvicorn's does), and `ended` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = anyio.Event()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended.set()
            self.hang_up.set()


@pytest.mark.parametrize("prime", [True, False], ids=["2025-11-25", "2025-06-18"])
async def test_an_upstreams_mid_call_cut_ends_a_primed_stream_and_its_reply_waits_in_the_log(prime: bool) -> None:
    """A cut (an upstream closed its own stream for the call) ends a 2025-11-25 request's stream
    after what came before, the call going on, its reply kept for Last-Event-ID; a stream without
    a priming event (before 2025-11-25, whose clients need not resume) carries the reply as ever."""
    go_on = anyio.Event()

    async def answer(stream: ProgressSink, cut: StreamCut) -> Any:
        await stream(PROGRESS)
        cut()
        cut()  # the upstream's stream broke again while resuming: nothing more to end
        await go_on.wait()
        return REPLY

    log = EventLog("5")
    connection = Served()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.run, ReplyStream(answer, log, resumable=True, prime=prime))
            if prime:
                await connection.ended.wait()  # the client's stream ended before the reply
                assert not log.closed
            else:
                await anyio.wait_all_tasks_blocked()
                assert not connection.ended.is_set()
            go_on.set()
    body = connection.body()
    assert log.last == 2 and log.closed
    assert b"id: 5-1\nevent: message\ndata: " + jsonrpc.encode(PROGRESS) in body
    assert (b"id: 5-2\n" in body) is not prime  # the reply: on the stream, or waiting for Last-Event-ID


async def test_poll_after_ends_a_primed_stream_still_without_its_reply() -> None:
    """`--sse-poll-after 0`: the stream ends after its priming event, the call going on."""
    go_on = anyio.Event()

    async def answer(stream: ProgressSink, cut: StreamCut) -> Any:
        await go_on.wait()
        return REPLY

    log = EventLog("6")
    connection = Served()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.run, ReplyStream(answer, log, resumable=True, prime=True, poll_after=0))
            await connection.ended.wait()
            go_on.set()
    assert connection.body() == b"id: 6-0\nretry: %d\ndata: \n\n" % RECONNECT_MS
    assert log.last == 1 and log.closed  # the reply waits for Last-Event-ID


async def test_a_sessions_standalone_stream_delivers_what_waits_then_ends_with_the_session() -> None:
    outbox = Outbox()
    entry = HttpSession("s", cast(Any, None), cast(Any, None), outbox)  # the stream reads only busy
    await outbox.send(PROGRESS)
    connection = Connection()
    async with anyio.create_task_group() as tg:
        tg.start_soon(connection.run, EventStream(entry, outbox.events.standalone, 0))
        await anyio.wait_all_tasks_blocked()
        assert entry.busy == 1
        outbox.close()
    assert entry.busy == 0
    assert connection.body() == b": stream open\n\nid: 0-1\nevent: message\ndata: " + jsonrpc.encode(PROGRESS) + b"\n\n"


@pytest.mark.parametrize(
    ("accept", "prefers"),
    [
        (None, False),
        ("", False),
        ("application/json", False),
        ("application/json, text/event-stream", False),  # the SDKs' order: JSON, the cheaper answer
        ("text/event-stream, application/json", True),
        ("text/event-stream", True),
        ("Text/Event-Stream ; charset=utf-8, application/json", True),
        ("application/json;q=0.5, text/event-stream", True),
        ("text/event-stream;q=0.2, application/json", False),
        # A malformed q is ignored (proxy.protocol.headers.accept_weights): weight 1, first listed wins.
        ("text/event-stream;q=oops, application/json", True),
        ("text/event-stream;q=2, application/json;q=0.9", True),
        ("application/json;q=nan, text/event-stream", False),
        ("application/json;q=0.9, text/event-stream;q=-1", True),
        ("*/*", False),
    ],
)
def test_prefers_event_stream_follows_the_accept_ranking(accept: str | None, prefers: bool) -> None:
    assert prefers_event_stream(accept) is prefers
