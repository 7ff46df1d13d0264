"""Numbered SSE events for session-era HTTP clients, kept (bounded) for `Last-Event-ID` resumption.

Every SSE stream the proxy opens for a session-era session (the standalone GET stream, and the
stream of each request that asked for progress) writes into an `EventLog`; each event gets the id
`<stream>-<n>`. A client whose connection broke sends GET with `Last-Event-ID`: the proxy replays
what followed on that same stream (never another stream's messages) and goes on with what is yet
to come. A log keeps its last `EVENTS_PER_STREAM` events; a session keeps the logs of its last
`STREAMS_KEPT` finished request streams. 2026-07-28 has no resumption: its streams use a log
only as their buffer and send no ids.
"""

from __future__ import annotations

import itertools
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio

log = logging.getLogger("frugal_proxy.http_events")

EVENTS_PER_STREAM = 1024
STREAMS_KEPT = 64


class EventLog:
    """One stream's events in order, the last `keep` of them held; readers follow it."""

    def __init__(self, stream_id: str, keep: int = EVENTS_PER_STREAM) -> None:
        self.stream_id = stream_id
        self._events: deque[bytes] = deque(maxlen=keep)
        self._last = 0  # number of the newest event; the oldest held is _last - len(_events) + 1
        self._wake = anyio.Event()
        self.closed = False
        self.delivered = 0  # the newest event a connection has written out
        self._reader: anyio.CancelScope | None = None

    @property
    def last(self) -> int:
        return self._last

    def append(self, data: bytes) -> None:
        if self.closed:
            log.info("a message for a closed stream was dropped")
            return
        if len(self._events) == self._events.maxlen and self._last - len(self._events) + 1 > self.delivered:
            log.warning(
                "an SSE stream's buffer is full and its oldest undelivered message was dropped; "
                "the client is not reading it (open the GET stream, or resume with Last-Event-ID)",
                extra={"stream": self.stream_id},
            )
        self._last += 1
        self._events.append(data)
        self._wake.set()
        self._wake = anyio.Event()

    def close(self) -> None:
        """Nothing more will be appended; readers end once they have the rest."""
        self.closed = True
        self._wake.set()

    @contextmanager
    def reader(self) -> Iterator[anyio.CancelScope]:
        """The scope of the one connection that reads this stream: a newer one (a client that
        reconnected before the proxy noticed the old connection break) takes over, cancelling it,
        so that no message goes out on two connections."""
        if self._reader is not None:
            self._reader.cancel()
        scope = self._reader = anyio.CancelScope()
        try:
            with scope:
                yield scope
        finally:
            if self._reader is scope:
                self._reader = None

    def event_id(self, number: int) -> str:
        return f"{self.stream_id}-{number}"

    async def follow(self, after: int) -> AsyncIterator[tuple[int, bytes]]:
        """Every event numbered above `after` (those still held), then each new one as it comes,
        until the log is closed."""
        while True:
            wake = self._wake
            while after < self._last:
                oldest = self._last - len(self._events) + 1  # again each time: the reader may lag
                if after + 1 < oldest:
                    log.warning(
                        "an SSE stream's reader fell behind its buffer bound; events were lost",
                        extra={"stream": self.stream_id, "lost": oldest - after - 1},
                    )
                    after = oldest - 1
                after += 1
                yield after, self._events[after - oldest]
            if self.closed:
                return
            await wake.wait()

    def written(self, number: int) -> None:
        """A connection has written event `number` out (a new GET without Last-Event-ID starts
        after the newest such)."""
        self.delivered = max(self.delivered, number)


class EventLogs:
    """A session's event logs by stream id: the standalone stream's and its request streams'."""

    def __init__(self, kept: int = STREAMS_KEPT) -> None:
        self._ids = itertools.count(1)
        self._logs: OrderedDict[str, EventLog] = OrderedDict()
        self._kept = kept
        self.standalone = EventLog("0")
        self._logs["0"] = self.standalone

    def open(self) -> EventLog:
        """A log for a new request stream; the oldest finished ones beyond the bound are forgotten."""
        stream = EventLog(str(next(self._ids)))
        self._logs[stream.stream_id] = stream
        finished = [key for key, value in self._logs.items() if value.closed and key != "0"]
        for key in finished[: max(0, len(self._logs) - 1 - self._kept)]:
            del self._logs[key]
        return stream

    def resume(self, last_event_id: str) -> tuple[EventLog, int] | None:
        """The log an event id names and the event's number; None for an id this session never
        sent or no longer holds."""
        stream_id, sep, number = last_event_id.strip().rpartition("-")
        found = self._logs.get(stream_id) if sep else None
        if found is None or not (number.isascii() and number.isdigit() and len(number) <= 20):
            return None
        if int(number) > found.last:
            return None
        return found, int(number)

    def close(self) -> None:
        for stream in self._logs.values():
            stream.close()
