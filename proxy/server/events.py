"""Numbered SSE events for session-era HTTP clients, kept (bounded) for `Last-Event-ID` resumption.

Every SSE stream the proxy opens for a session-era session (the standalone GET stream, and the
stream of each request that asked for progress) writes into an `EventLog`; each event gets the id
`<stream>-<n>`. A client whose connection broke sends GET with `Last-Event-ID`: the proxy replays
what followed on that same stream (never another stream's messages) and goes on with what is yet
to come. The bounds: a log keeps its last `EVENTS_PER_STREAM` events and `BYTES_PER_STREAM`
bytes of them (its newest event always, however large: a reply is never dropped for its size);
a session keeps the logs of its last `STREAMS_KEPT` finished request streams, `FINISHED_BYTES`
of them at most (the newest always), each for `RESUME_SECONDS` after its reply. 2026-07-28 has
no resumption: its streams use a log only as their buffer and send no ids.

`resume` says what is wrong with an id it cannot resume (`Unresumable`): not one of the proxy's,
a stream the session never opened or no longer holds, an event the stream has not sent.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio

log = logging.getLogger("frugal_proxy.http_events")

EVENTS_PER_STREAM = 1024
BYTES_PER_STREAM = 4 * 1024 * 1024
STREAMS_KEPT = 64
FINISHED_BYTES = 16 * 1024 * 1024
RESUME_SECONDS = 300.0


@dataclass
class Cut:
    """Where one connection's writing of a stream stops before the stream ends (SEP-1699: the
    server closes a request's stream mid-call and the client resumes it with Last-Event-ID):
    after event `at`, once set."""

    at: int | None = None


class Unresumable(Exception):
    """A Last-Event-ID the session cannot resume from; the message says why and what to do."""


class EventLog:
    """One stream's events in order, the last `keep` of them (and `keep_bytes` of their bytes,
    the newest always) held; readers follow it."""

    def __init__(
        self,
        stream_id: str,
        keep: int = EVENTS_PER_STREAM,
        keep_bytes: int = BYTES_PER_STREAM,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream_id = stream_id
        self._events: deque[bytes] = deque()
        self._keep = keep
        self._keep_bytes = keep_bytes
        self.size = 0  # the bytes of the events held
        self._last = 0  # number of the newest event; the oldest held is _last - len(_events) + 1
        self._wake = anyio.Event()
        self._clock = clock
        self.closed = False
        self.closed_at: float | None = None
        self.delivered = 0  # the newest event a connection has written out
        self._reader: anyio.CancelScope | None = None

    @property
    def last(self) -> int:
        return self._last

    def append(self, data: bytes) -> None:
        if self.closed:
            log.info("a message for a closed stream was dropped")
            return
        self._last += 1
        self._events.append(data)
        self.size += len(data)
        dropped = 0
        while len(self._events) > 1 and (len(self._events) > self._keep or self.size > self._keep_bytes):
            dropped += self.first > self.delivered
            self.size -= len(self._events.popleft())
        if dropped:
            log.warning(
                "an SSE stream's buffer is full and its oldest undelivered messages were dropped; "
                "the client is not reading it (open the GET stream, or resume with Last-Event-ID)",
                extra={"stream": self.stream_id, "dropped": dropped},
            )
        self.nudge()

    def nudge(self) -> None:
        """Wake the readers (a new event, the end, or a cut)."""
        self._wake.set()
        self._wake = anyio.Event()

    def close(self) -> None:
        """Nothing more will be appended; readers end once they have the rest."""
        if not self.closed:
            self.closed = True
            self.closed_at = self._clock()
        self._wake.set()

    @property
    def first(self) -> int:
        """The number of the oldest event held (`last + 1` when none is)."""
        return self._last - len(self._events) + 1

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

    async def follow(self, after: int, cut: Cut | None = None) -> AsyncIterator[tuple[int, bytes]]:
        """Every event numbered above `after` (those still held), then each new one as it comes,
        until the log is closed, or, with a `cut` that is set, until the event it names."""
        while True:
            wake = self._wake
            while after < self._last and (cut is None or cut.at is None or after < cut.at):
                oldest = self.first  # again each time: the reader may lag
                if after + 1 < oldest:
                    log.warning(
                        "an SSE stream's reader fell behind its buffer bound; events were lost",
                        extra={"stream": self.stream_id, "lost": oldest - after - 1},
                    )
                    after = oldest - 1
                after += 1
                yield after, self._events[after - oldest]
            if self.closed or (cut is not None and cut.at is not None and after >= cut.at):
                return
            await wake.wait()

    def written(self, number: int) -> None:
        """A connection has written event `number` out (a new GET without Last-Event-ID starts
        after the newest such)."""
        self.delivered = max(self.delivered, number)


class EventLogs:
    """A session's event logs by stream id: the standalone stream's and its request streams'."""

    def __init__(
        self,
        kept: int = STREAMS_KEPT,
        *,
        kept_bytes: int = FINISHED_BYTES,
        resume_seconds: float = RESUME_SECONDS,
        keep_bytes: int = BYTES_PER_STREAM,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ids = itertools.count(1)
        self._logs: OrderedDict[str, EventLog] = OrderedDict()
        self._kept = kept
        self._kept_bytes = kept_bytes
        self._resume_seconds = resume_seconds
        self._keep_bytes = keep_bytes
        self._clock = clock
        self.standalone = EventLog("0", keep_bytes=keep_bytes, clock=clock)
        self._logs["0"] = self.standalone

    def open(self) -> EventLog:
        """A log for a new request stream; finished ones beyond the bounds are forgotten."""
        stream = EventLog(str(next(self._ids)), keep_bytes=self._keep_bytes, clock=self._clock)
        self._logs[stream.stream_id] = stream
        self._forget()
        return stream

    def _forget(self) -> None:
        """Forget the finished request logs past their time, then the oldest of the rest beyond
        the count or the bytes bound (the newest finished one is kept: its client may be about to
        resume it)."""
        now = self._clock()
        finished = [value for key, value in self._logs.items() if value.closed and key != "0"]
        for stream in finished:
            if stream.closed_at is not None and now - stream.closed_at > self._resume_seconds:
                del self._logs[stream.stream_id]
        finished = [stream for stream in finished if stream.stream_id in self._logs]
        size = sum(stream.size for stream in finished)
        while len(finished) > 1 and (len(finished) > self._kept or size > self._kept_bytes):
            oldest = finished.pop(0)
            del self._logs[oldest.stream_id]
            size -= oldest.size

    def resume(self, last_event_id: str) -> tuple[EventLog, int]:
        """The log an event id names and the event's number; Unresumable, saying why, for an id
        that is not one of the proxy's, or that names a stream or event this session never sent
        or no longer holds."""
        self._forget()
        stream_id, sep, number = last_event_id.strip().rpartition("-")
        if not (sep and stream_id.isascii() and stream_id.isdigit() and number.isascii() and number.isdigit()):
            raise Unresumable(
                f"Last-Event-ID {last_event_id[:40]!r} is not an event id of this server (they are "
                "<stream>-<number>, from an SSE event's `id`); open the GET stream without it"
            )
        found = self._logs.get(stream_id) if len(stream_id) <= 20 else None
        if found is None:
            raise Unresumable(
                f"Last-Event-ID {last_event_id[:40]!r} names stream {stream_id[:20]}, which this session "
                f"never opened or no longer holds (a finished stream is kept {self._resume_seconds:g} s, "
                f"among the last {self._kept}); send the request again, or open the GET stream without it"
            )
        if len(number) > 20 or int(number) > found.last:
            raise Unresumable(
                f"Last-Event-ID {last_event_id[:40]!r} names an event stream {stream_id} has not sent "
                f"(its newest is {found.event_id(found.last)}); resume from an id the stream sent"
            )
        return found, int(number)

    def close(self) -> None:
        for stream in self._logs.values():
            stream.close()
