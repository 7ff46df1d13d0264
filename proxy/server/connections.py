"""Connection limits of the HTTP face, kept where uvicorn keeps its connections: its h11 protocol.

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) but neither how long a client
may take to send a request's headers or body nor how many connections it may hold, so a few
hundred connections that never finish their headers used to take every file descriptor and lock
every client out. `LimitedH11Protocol` adds, per connection:

- a cap on open connections per client IP and overall (`ConnectionLimits`, sans-IO): a
  connection over either is answered 503 with what limit was hit and the flag that raises it,
  then closed;
- a header deadline from the connection's start (or the end of its previous response) to its
  request's complete headers, and a body deadline from the headers to the body's end: a late
  connection gets 408 while a response is still possible, and is closed.

and, for the speed of every small call:

- the writes of one event-loop turn (a response's head, its body, a chunked body's end) leave
  in one send (`_Coalescer`), not two or three;
- a request's scope carries `DISCONNECT_HOOK` under `extensions`: a callable that takes a
  callback to run if the client disconnects before the response is complete (at once when it
  already has) and returns the callable that takes it back. A handler can then be cancelled by
  the disconnect without a task of its own waiting on `receive()` for it.

`limited_protocol` binds a set of limits to the class uvicorn is handed as `http=`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE  # uvicorn reads it there too
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("frugal_proxy.http_connections")

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_MAX_CONNECTIONS_PER_IP = 256
# A refused connection is answered once its request arrives (answering before it has been read
# would reset the connection under the client and lose the 503), but waits for it no longer than
# this, and only so many wait at once: past that they are closed at once, unanswered.
REFUSAL_WAIT = 0.5
MAX_WAITING_REFUSALS = 100
WARN_EVERY = 10.0  # seconds between two warnings of one kind: a flood must not become a log flood
DISCONNECT_HOOK = "frugal.on_disconnect"  # the scope["extensions"] key of the disconnect hook


@dataclass
class ConnectionLimits:
    """Open connections by client IP and overall, and the caps on them."""

    overall: int = DEFAULT_MAX_CONNECTIONS
    per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    open: Counter[str] = field(default_factory=Counter)
    total: int = 0
    waiting_refusals: int = 0
    _warned: dict[str, float] = field(default_factory=dict)
    _unsaid: Counter[str] = field(default_factory=Counter)

    def warn(self, message: str, now: float, **extra: object) -> None:
        """Log `message` at warn, at most once per WARN_EVERY seconds; the next one says how
        many were left unsaid in between."""
        if now - self._warned.get(message, -WARN_EVERY) < WARN_EVERY:
            self._unsaid[message] += 1
            return
        self._warned[message] = now
        log.warning(message, extra={**extra, "also_since_last": self._unsaid.pop(message, 0)})

    def admit(self, ip: str) -> str | None:
        """Count a new connection from `ip` in and return None, or say which cap refuses it."""
        if self.total >= self.overall:
            return (
                f"too many open connections ({self.overall}, the proxy's limit); try again shortly, "
                "or raise it with --max-connections"
            )
        if self.open[ip] >= self.per_ip:
            return (
                f"too many open connections from {ip} ({self.per_ip}, the per-client-IP limit); close some, "
                "or raise it with --max-connections-per-ip"
            )
        self.open[ip] += 1
        self.total += 1
        return None

    def release(self, ip: str) -> None:
        """A connection `admit` let in has closed."""
        self.total -= 1
        self.open[ip] -= 1
        if self.open[ip] <= 0:
            del self.open[ip]


def plain_response(status: int, reason: str, code: str, message: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 response that closes the connection, with the guard's JSON refusal body."""
    body = json.dumps({"error": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"connection: close\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + body


class _ExplainedConnection(h11.Connection):
    """h11's connection, keeping why it refused a request (uvicorn's 400 says only "invalid")."""

    refusal = ""

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refusal = str(exc)
            raise


class _Coalescer:
    """A connection's transport as its responses see it: what they write in one event-loop turn
    is sent together at the end of that turn (uvicorn writes a response's head and its body
    apart: two sends, two TCP segments, two wake-ups of the client, for each small answer)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append(data)

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if pending and not self.transport.is_closing():
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def nothing() -> None:
    """A callable that does nothing (a hook taken back, a cancel with nothing to cancel)."""
    return None


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with connection caps and header and body read deadlines."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
        self.conn = _ExplainedConnection(h11.SERVER, size)  # headers over `size` (16 KiB) get a 400
        self._ip: str | None = None  # set once admitted: the connection counts against the caps
        self._refusal: bytes | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = ""  # "headers", "body" or "" (no deadline running)
        self._out: _Coalescer | None = None
        self._fitted: object = None  # the request cycle last given the coalescer and the hook
        self._on_lost: list[Callable[[], object]] = []

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._out = _Coalescer(transport, self.loop)
        ip = self.client[0] if self.client else "?"
        refusal = self.limits.admit(ip)
        if refusal is None:
            self._ip = ip
            self._arm("headers")
            return
        self.limits.warn("connection refused: over a connection limit", self.loop.time(), status=503, reason=refusal)
        if self.limits.waiting_refusals >= MAX_WAITING_REFUSALS:
            transport.close()
            return
        self.limits.waiting_refusals += 1
        retry = "retry-after: 1\r\n"
        self._refusal = plain_response(503, "Service Unavailable", "too_many_connections", refusal, retry)
        self._deadline = self.loop.call_later(REFUSAL_WAIT, self._refuse)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._out is not None:
            self._out.pending.clear()  # nobody to send it to
        if self._on_lost and self.cycle is not None and not self.cycle.response_complete:
            lost, self._on_lost = self._on_lost, []
            for callback in lost:
                callback()
        if self._refusal is not None:
            self._refusal = None
            self.limits.waiting_refusals -= 1
        if self._ip is not None:
            self.limits.release(self._ip)
            self._ip = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            self._refuse()
            return
        if self._waiting_for == "" and self.conn.their_state is h11.IDLE:
            self._arm("headers")  # the next request on a kept-alive connection
        super().data_received(data)
        self._fit_cycle()
        self._follow()

    def on_response_complete(self) -> None:
        self._on_lost.clear()  # they were the finished request's: a later one's loss is not theirs
        super().on_response_complete()
        # The keep-alive timer now runs; pipelined requests already parsed start their own clock.
        self._fit_cycle()
        self._follow()

    def _fit_cycle(self) -> None:
        """Give a request cycle just made (its task has not run yet) the coalescing transport
        and, in its scope, the disconnect hook."""
        cycle = self.cycle
        if cycle is None or cycle is self._fitted or self._out is None:
            return
        self._fitted = cycle
        cycle.transport = self._out  # type: ignore[assignment]
        scope: dict[str, Any] = cycle.scope  # type: ignore[assignment]
        scope.setdefault("extensions", {})[DISCONNECT_HOOK] = self._when_lost

    def _when_lost(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run `callback` if the client disconnects before the current response is complete (at
        once when it has already); the callable returned takes it back."""
        if self.cycle is not None and self.cycle.disconnected:
            callback()
            return nothing
        self._on_lost.append(callback)

        def take_back() -> None:
            if callback in self._on_lost:
                self._on_lost.remove(callback)

        return take_back

    def shutdown(self) -> None:
        self._flush()  # a response completed in this loop turn leaves before the connection closes
        super().shutdown()

    def timeout_keep_alive_handler(self) -> None:
        self._flush()
        super().timeout_keep_alive_handler()

    def _flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    def send_400_response(self, msg: str) -> None:
        self._flush()  # what an earlier response wrote goes first
        reason = getattr(self.conn, "refusal", "")  # e.g. "Found multiple Host: headers"
        self.limits.warn("malformed HTTP request refused", self.loop.time(), status=400, reason=reason)
        super().send_400_response(f"{msg} {reason}".strip())

    def _follow(self) -> None:
        """Move the deadline along with the request's progress."""
        state = self.conn.their_state
        if self._waiting_for == "headers" and state is not h11.IDLE:
            self._disarm()
        if state is h11.SEND_BODY and self._waiting_for == "":
            self._arm("body")
        elif self._waiting_for == "body" and state is not h11.SEND_BODY:
            self._disarm()

    def _arm(self, what: str) -> None:
        self._disarm()
        seconds = self.limits.header_timeout if what == "headers" else self.limits.body_timeout
        self._waiting_for = what
        self._deadline = self.loop.call_later(seconds, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = ""

    def _late(self) -> None:
        what, self._deadline = self._waiting_for, None
        self._waiting_for = ""
        if self.transport.is_closing():
            return
        seconds = self.limits.header_timeout if what == "headers" else self.limits.body_timeout
        flag = "--header-timeout" if what == "headers" else "--body-timeout"
        message = f"the request's {what} did not arrive within {seconds:g} s ({flag}); the connection is closed"
        self.limits.warn("slow client's connection closed", self.loop.time(), status=408, waiting_for=what)
        self._flush()
        if self.cycle is None or not self.cycle.response_started:
            # Written past h11, which would not answer a request it has not seen whole.
            self.transport.write(plain_response(408, "Request Timeout", "request_timeout", message))
        self.transport.close()

    def _refuse(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._refusal is not None and not self.transport.is_closing():
            self.transport.write(self._refusal)
            self.transport.close()


def limited_protocol(limits: ConnectionLimits) -> type[LimitedH11Protocol]:
    """The protocol class for uvicorn's `http=`, counting against `limits`."""
    return type("LimitedH11Protocol", (LimitedH11Protocol,), {"limits": limits})
