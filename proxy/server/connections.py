"""Connection limits of the HTTP face, kept where uvicorn keeps its connections: its httptools
protocol (llhttp parses a request in C: about 400 fewer Python function calls per request than
h11, measured).

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) but neither how long a client
may take to send a request's headers or body nor how many connections it may hold, so a few
hundred connections that never finish their headers used to take every file descriptor and lock
every client out. `LimitedHttpToolsProtocol` adds, per connection:

- a cap on open connections per client IP and overall (`ConnectionLimits`, sans-IO): a
  connection over either takes the place of one that waits on its client (the oldest that has
  not completed a request, then the longest idle; never one that showed a valid bearer token,
  which the guard reports through `TRUST_HOOK`), which is shed with a 503 saying why; with none
  waiting, the new one is answered 503 with what limit was hit and the flag that raises it,
  then closed;
- a header deadline from the connection's start (or from the first byte of a kept-alive
  connection's next request, or from the end of the answer before it for a request that came
  while it was answered) to its request's complete headers, and a body deadline from the
  headers to the body's end: a late connection gets 408 while a response is still possible, and
  is closed;
- a 400 naming why for a request that cannot be served: what llhttp refuses (with its reason,
  where uvicorn says only "invalid"), and what h11 refused that llhttp lets through: a second
  Host header, none in HTTP/1.1, a transfer coding other than chunked, a request line and
  headers over `MAX_HEAD_BYTES` (16 KiB, h11's bound); and one h11 served that llhttp cannot: a
  request with `Upgrade` and a body (llhttp ends it at its headers: the body would be lost). A
  refused request on a kept-alive connection is answered after the
  requests before it. A method llhttp does not know (any token h11 took) still reaches the app,
  which answers it (405) as before, wherever it comes in a read; `CONNECT` gets a 405 of its own
  and the connection is closed (llhttp would take what follows as the tunnel's bytes); and since
  nothing is upgraded to, an `Upgrade:` request is served as it is and the requests after it in
  the same read too (llhttp stops at it);

and, for the speed of every small call:

- the writes of one event-loop turn (a response's head, its body, a chunked body's end) leave
  in one send (`_Coalescer`), not two or three;
- a request's scope carries `DISCONNECT_HOOK` under `extensions`: a callable that takes a
  callback to run if the client disconnects before the response is complete (at once when it
  already has) and returns the callable that takes it back. A handler can then be cancelled by
  the disconnect without a task of its own waiting on `receive()` for it;
- and `RESPOND_HOOK`: a callable that writes a whole small response (the request's scope,
  status, headers, body) as uvicorn's `send` writes a start and a last body message, in one
  write at once, and notes its status in the request's scope under `RESPONDED_KEY` (where
  `HttpMetrics` reads it, as it does not see it pass); False, with nothing written, when the
  response must take `send` (it has started, the client has left, the transport's buffer is
  full, or an access log is kept).

`limited_protocol` binds a set of limits to the class uvicorn is handed as `http=`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

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
RESPOND_HOOK = "frugal.respond"  # the scope["extensions"] key of the whole-response writer
RESPONDED_KEY = "frugal.responded"  # the scope key of the status that writer wrote
TRUST_HOOK = "frugal.trust"  # the scope["extensions"] key the guard calls once a valid token was shown
MAX_HEAD_BYTES = 16 * 1024  # a request line and headers over this get a 400 (h11's bound, kept)
_HEAD, _BODY, _DONE = "head", "body", "done"  # how far the request being read has come
_WHITESPACE = (0x20, 0x09)
_UNKNOWN_METHOD = "Invalid method encountered"  # llhttp's reason
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")  # RFC 9110's token: what h11 took as a method
_FIRST_STEP = 64  # bytes: where the look for a request's start begins (most requests fit)


# How far a connection that may be shed has come, the first shed first: it has not completed a
# request since it opened, or it has (and is idle, or sending its next request).
UNPROVEN, IDLE = 0, 1


class Sheddable(Protocol):
    """A connection that can be closed to make room for a new one."""

    def shed(self, why: str) -> None: ...


@dataclass
class ConnectionLimits:
    """Open connections by client IP and overall, and the caps on them.

    A new connection over a cap takes the place of one waiting on its client (`wait`): one that
    has not completed a request since it opened, the oldest first, else one idle or sending its
    next request, the oldest first; the same client IP's for the per-IP cap, anyone's for the
    overall one. Only when none waits (every one is being answered, or showed a valid token) is
    the new one refused."""

    overall: int = DEFAULT_MAX_CONNECTIONS
    per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    open: Counter[str] = field(default_factory=Counter)
    total: int = 0
    waiting_refusals: int = 0
    _warned: dict[str, float] = field(default_factory=dict)
    _unsaid: Counter[str] = field(default_factory=Counter)
    # The connections that wait on their client, by tier (UNPROVEN, IDLE), oldest first (dicts
    # keep their insertion order, and a set and a del cost less than an OrderedDict's, once per
    # request): overall (with each one's client IP) and by client IP (while it has connections open).
    _waiting: tuple[dict[Sheddable, str], ...] = field(default_factory=lambda: ({}, {}), init=False, repr=False)
    _waiting_from: dict[str, tuple[dict[Sheddable, None], ...]] = field(default_factory=dict, init=False, repr=False)

    def warn(self, message: str, now: float, **extra: object) -> None:
        """Log `message` at warn, at most once per WARN_EVERY seconds; the next one says how
        many were left unsaid in between."""
        if now - self._warned.get(message, -WARN_EVERY) < WARN_EVERY:
            self._unsaid[message] += 1
            return
        self._warned[message] = now
        log.warning(message, extra={**extra, "also_since_last": self._unsaid.pop(message, 0)})

    def admit(self, ip: str) -> str | None:
        """Count a new connection from `ip` in and return None (a waiting one shed, when a cap
        is reached), or say which cap refuses it."""
        if self.open[ip] >= self.per_ip and not self._shed_one(ip):
            return (
                f"too many open connections from {ip} ({self.per_ip}, the per-client-IP limit), each "
                "being answered; close some, or raise it with --max-connections-per-ip"
            )
        if self.total >= self.overall and not self._shed_one(None):
            return (
                f"too many open connections ({self.overall}, the proxy's limit), each being answered; "
                "try again shortly, or raise it with --max-connections"
            )
        count = self.open[ip]
        if count == 0:
            self._waiting_from[ip] = ({}, {})
        self.open[ip] = count + 1
        self.total += 1
        return None

    def wait(self, connection: Sheddable, ip: str, tier: int) -> None:
        """`connection`, admitted from `ip`, waits on its client from now: it may be shed."""
        self._waiting[tier][connection] = ip
        self._waiting_from[ip][tier][connection] = None

    def unwait(self, connection: Sheddable, ip: str, tier: int) -> None:
        """`connection` no longer waits on its client (a request of it is complete, it closed)."""
        del self._waiting[tier][connection]
        del self._waiting_from[ip][tier][connection]

    def _shed_one(self, ip: str | None) -> bool:
        """Close the connection that has waited longest (of client `ip`, or of anyone), its
        place given back at once; False when none waits."""
        for tier in (UNPROVEN, IDLE):
            if ip is None:
                if not self._waiting[tier]:
                    continue
                victim, owner = next(iter(self._waiting[tier].items()))
            else:
                mine = self._waiting_from.get(ip)
                if mine is None or not mine[tier]:
                    continue
                victim, owner = next(iter(mine[tier])), ip
            self.unwait(victim, owner, tier)
            self.release(owner)
            which = "from that client IP" if ip is not None else "overall"
            flag = "--max-connections-per-ip" if ip is not None else "--max-connections"
            victim.shed(
                f"the proxy was at its connection limit {which} and this connection was waiting on its "
                f"request (the {'oldest that had not completed one' if tier == UNPROVEN else 'longest idle'}): "
                f"closed to make room; send requests promptly, or raise {flag}"
            )
            return True
        return False

    def release(self, ip: str) -> None:
        """A connection `admit` let in has closed."""
        self.total -= 1
        self.open[ip] -= 1
        if self.open[ip] <= 0:
            del self.open[ip]
            self._waiting_from.pop(ip, None)  # every connection of it has stopped waiting


def plain_response(status: int, reason: str, code: str, message: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 response that closes the connection, with the guard's JSON refusal body."""
    body = json.dumps({"error": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"connection: close\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + body


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

    def write_now(self, data: bytes) -> None:
        """Send `data` at once, after what this turn wrote before it."""
        if self.pending:
            self.pending.append(data)
            self.flush()
        elif not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def nothing() -> None:
    """A callable that does nothing (a hook taken back, a cancel with nothing to cancel)."""
    return None


class _Malformed(Exception):
    """A request breaks a rule llhttp does not check (raised from a parser callback)."""


class _NotServed(_Malformed):
    """A request for a method this server never serves (CONNECT): answered 405, not 400."""


class _Completions:
    """A parser's callbacks that only count the requests it completed (`_start_of`)."""

    def __init__(self) -> None:
        self.complete = 0

    def on_message_complete(self) -> None:
        self.complete += 1


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with connection caps, header and body read deadlines, and
    the request checks h11 made that llhttp does not (one Host header, and one at all in
    HTTP/1.1; no transfer coding but chunked; a bounded request head; values without trailing
    whitespace)."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ip: str | None = None  # set once admitted: the connection counts against the caps
        self._refusal: bytes | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = ""  # "headers", "body" or "" (no deadline running)
        self._reading = _DONE  # how far the request being read has come: _HEAD, _BODY or _DONE
        self._begun = 0  # requests begun on this connection
        self._head_size = 0  # the request target and headers parsed so far, in bytes
        self._fed_in_head = 0  # bytes of whole reads that came while the head was incomplete
        self._host_seen = False
        self._malformed: str | None = None  # why a request was refused: nothing more is read
        self._not_served = False  # that request's method is never served (CONNECT): a 405, not a 400
        self._method: str | None = None  # the method of a request parsed as a GET (_method_at)
        self._previous: RequestResponseCycle | None = None  # the request cycle before the newest one
        self._broken: RequestResponseCycle | None = None  # the cycle whose body was refused: it is never answered
        self._out: _Coalescer | None = None
        self._fitted: object = None  # the request cycle last given the coalescer and the hook
        self._on_lost: list[Callable[[], object]] = []
        self._lost = False
        self._idle_since: float | None = None  # when the last response ended, while no request is read
        self._tier: int | None = None  # UNPROVEN or IDLE while it waits on its client (it may be shed)
        self._trusted = False  # a request of it showed a valid bearer token: never shed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._out = _Coalescer(transport, self.loop)
        ip = self.client[0] if self.client else "?"
        refusal = self.limits.admit(ip)
        if refusal is None:
            self._ip = ip
            self._arm("headers")
            self._wait(UNPROVEN)
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
        self._lost = True
        self._disarm()
        self._unwait()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
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
        if self._malformed is not None:
            return  # the connection closes once the requests before the refused one are answered
        in_head, begun = self._reading == _HEAD, self._begun
        reason = self._feed(data, fresh=self._reading == _DONE)
        if reason is not None:
            self._refuse_malformed(reason)
            return
        if self._reading == _HEAD and in_head and begun == self._begun:
            # A read that came whole into one unfinished head: its partial header is buffered
            # in the parser, where no callback counts it.
            self._fed_in_head += len(data)
            if self._fed_in_head > MAX_HEAD_BYTES:
                self._refuse_malformed(_head_too_large())
                return
        self._follow()

    def _feed(self, data: bytes, fresh: bool) -> str | None:
        """Parse `data`, a read (`fresh`: it begins where a request begins); why a request in it
        cannot be served, or None. Two things llhttp stops at are carried on past, as h11 did:

        - a method it does not know (any token h11 took): that request is parsed again as a GET
          and handed on under its own name, so that the app answers it (a 405), wherever in the
          read it begins;
        - an `Upgrade:` request (the app serves no WebSocket, and nothing else is upgraded to):
          served as a plain request, which llhttp completed at its headers, and the bytes after
          it parsed as the requests that follow.

        The read is never copied: what is fed next is `head` (the GET that renamed a method),
        then the read from `at`; so however many such requests a read packs, its work stays
        linear in its size."""
        view = memoryview(data)
        at, head = 0, b""
        while True:
            begun = self._begun
            try:
                if head:
                    self.parser.feed_data(head)
                self.parser.feed_data(view[at:] if at else data)
            except httptools.HttpParserUpgrade as exc:
                self._unsupported_upgrade_warning()  # the app serves no WebSocket (uvicorn's ws="none")
                at, head, fresh = at + exc.args[0], b"", True
                self._new_parser()  # llhttp stays paused after an upgrade
                if at >= len(data):
                    return None
                continue
            except httptools.HttpParserError as exc:
                cause = exc.__context__
                if isinstance(cause, _Malformed):
                    self._not_served = isinstance(cause, _NotServed)
                    return str(cause)
                if str(exc) != _UNKNOWN_METHOD or not fresh:
                    return str(exc)
                # Every request begun before the refused one in this feed is complete: it begins
                # where the last of them ends.
                start = _start_of(head, view, at, self._begun - begun - 1)
                method = _method_at(data, start)
                if method is None:
                    return str(exc)
                at, self._method = method
                head = b"GET"
                self._new_parser()
                continue
            return None

    def _new_parser(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's

    # -- the parser's callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # A request has begun: the keep-alive timer finds the connection busy. (Not on any read:
        # llhttp passes over empty lines before a request, and a connection sending only those
        # would have neither the keep-alive timer nor a header deadline.)
        self._idle_since = None
        self._reading = _HEAD
        self._begun += 1
        self._head_size = self._fed_in_head = 0
        self._host_seen = False

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._reading == _BODY:
            # A chunked body's trailer field: llhttp hands it on like a header, after the guard
            # has read the headers. Dropped, as h11 dropped it (no `Authorization` comes late).
            return
        self._head_size += len(name) + len(value) + 4
        name = name.lower()
        if value and value[-1] in _WHITESPACE:  # llhttp keeps a value's trailing whitespace
            value = value.rstrip(b" \t")
        if name == b"host":
            if self._host_seen:
                raise _Malformed("Found multiple Host: headers")  # RFC 9112 3.2: 400
            self._host_seen = True
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        elif name == b"transfer-encoding" and value.lower() != b"chunked":
            # llhttp would take `gzip, chunked` as chunked and hand on the coded body
            raise _Malformed("Only Transfer-Encoding: chunked is supported")
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.parser.get_method() == b"CONNECT":  # a tunnel: llhttp would take what follows as its bytes
            target = self.url.decode("latin-1")[:200]
            raise _NotServed(f"CONNECT {target}: CONNECT is not served here (this is no forward proxy)")
        if self.parser.should_upgrade() and _carries_body(self.headers):
            # llhttp ends an Upgrade request at its headers: its body would be lost
            raise _Malformed("a request with Upgrade and a body is not served; send it without Upgrade")
        if self._head_size > MAX_HEAD_BYTES:
            raise _Malformed(_head_too_large())
        if not self._host_seen and self.parser.get_http_version() == "1.1":
            raise _Malformed("Missing mandatory Host: header")  # RFC 9112 3.2: 400
        self._reading = _BODY
        if self._waiting_for == "headers":
            self._disarm()
        self._previous = self.cycle
        super().on_headers_complete()
        if self._method is not None:
            self.scope["method"], self._method = self._method, None
        cycle = self.cycle
        if cycle is not None and cycle is not self._fitted:
            # The cycle's task has not run yet: it writes through the coalescer, and its scope
            # carries the disconnect hook.
            self._fitted = cycle
            cycle.transport = self._out  # type: ignore[assignment]
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            # (bound to the connection, not the request: a request's scope that held a callable
            # holding its cycle would make every request a reference cycle for the collector)
            hooks = {DISCONNECT_HOOK: self._when_lost, RESPOND_HOOK: self._respond, TRUST_HOOK: self._trust}
            scope["extensions"] = hooks

    def on_message_complete(self) -> None:
        self._reading = _DONE
        if self._tier is not None:
            self._unwait()  # a whole request came: the connection is being answered
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._on_lost.clear()  # they were the finished request's: a later one's loss is not theirs
        if self.pipeline or self.transport.is_closing():
            super().on_response_complete()  # starts the next pipelined request
        else:
            # uvicorn's, but the keep-alive timer is not made anew for every response (and
            # cancelled by the next request: a timer, its cancellation and two heap operations
            # per request): one timer runs while the connection lives and checks when it fires.
            self.server_state.total_requests += 1
            self.flow.resume_reading()
            if self._reading == _HEAD:
                # The next request's head began while this one was answered: its deadline runs
                # from now, and the connection is not idle.
                self._arm("headers")
            else:
                self._idle_since = self.loop.time()
                if self.timeout_keep_alive_task is None:
                    self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)
            if self._reading != _BODY:  # (a body still coming after its early answer is no wait)
                self._wait(IDLE)
        if self._malformed is not None and self._answered():
            self._send_malformed()

    def _unset_keepalive_if_required(self) -> None:
        self._idle_since = None  # a request has come: the timer finds the connection busy

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        if self._idle_since is None:
            return  # busy: the end of its response starts the timer again
        left = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()

    # -- shedding under a connection cap -------------------------------------------------------------

    def _wait(self, tier: int) -> None:
        """From now until a request of it is complete, the connection waits on its client."""
        if self._ip is not None and self._tier is None and not self._trusted:
            self._tier = tier
            self.limits.wait(self, self._ip, tier)

    def _unwait(self) -> None:
        if self._tier is not None and self._ip is not None:
            self.limits.unwait(self, self._ip, self._tier)
        self._tier = None

    def _trust(self) -> None:
        """`TRUST_HOOK`: a request of this connection showed a valid bearer token."""
        self._trusted = True
        self._unwait()

    def shed(self, why: str) -> None:
        """Close the connection to make room for a new one (`ConnectionLimits` has given its
        place back already): a 503 saying `why` when a request of it was begun or none was
        sent yet, nothing when it is idle between requests."""
        self._tier = self._ip = None
        self._disarm()
        self.limits.warn("connection shed to make room under a connection limit", self.loop.time(), status=503)
        if self.transport.is_closing():
            return
        self._flush()
        cycle = self.cycle
        idle = self._reading == _DONE and self._begun > 0
        if not idle and not self.pipeline and (cycle is None or cycle.response_complete or not cycle.response_started):
            refusal = plain_response(503, "Service Unavailable", "too_many_connections", why, "retry-after: 1\r\n")
            self.transport.write(refusal)
        self.transport.close()

    # -- the disconnect hook -------------------------------------------------------------------------

    def _when_lost(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run `callback` if the client disconnects before the current response is complete (at
        once when it has already); the callable returned takes it back."""
        if self._lost:
            callback()
            return nothing
        self._on_lost.append(callback)

        def take_back() -> None:
            if callback in self._on_lost:
                self._on_lost.remove(callback)

        return take_back

    # -- writing -------------------------------------------------------------------------------------

    def _respond(self, scope: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """`RESPOND_HOOK`: what uvicorn's `send` does for a start and one last body message,
        in one write, for the request whose `scope` it is (its `extensions` tell it apart from
        a request pipelined after it). `headers` are the caller's own (known valid, a
        content-length among them matching `body`)."""
        extensions = scope.get("extensions")
        cycle: RequestResponseCycle | None = self.cycle
        if cycle is None or cycle.scope.get("extensions") is not extensions:
            cycle = self._previous  # a pipelined request came after it
            if cycle is None or cycle.scope.get("extensions") is not extensions:
                return False
        if cycle.response_started or cycle.disconnected or cycle.flow.write_paused or cycle.access_log:
            return False
        if cycle.scope["method"] == "HEAD":
            return False
        cycle.response_started = cycle.response_complete = True
        cycle.waiting_for_100_continue = False
        content = [STATUS_LINE[status]]
        for name, value in cycle.default_headers:
            content += (name, b": ", value, b"\r\n")
        for name, value in headers:
            content += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", body)
        own: dict[str, Any] = cycle.scope  # type: ignore[assignment]
        own[RESPONDED_KEY] = status
        out = self._out
        assert out is not None
        out.write_now(b"".join(content))
        cycle.message_event.set()
        if not cycle.keep_alive:
            out.close()
        cycle.on_response()
        return True

    def shutdown(self) -> None:
        self._flush()  # a response completed in this loop turn leaves before the connection closes
        super().shutdown()

    def timeout_keep_alive_handler(self) -> None:
        self._flush()
        super().timeout_keep_alive_handler()

    def _flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    def _answered(self) -> bool:
        """Whether every request parsed so far has its complete response (but one whose body
        was refused, which never will)."""
        cycle = self._previous if self.cycle is not None and self.cycle is self._broken else self.cycle
        return not self.pipeline and (cycle is None or cycle.response_complete)

    def _refuse_malformed(self, reason: str) -> None:
        """Answer a request that cannot be served with a 400 naming why, once the requests
        before it on the connection are answered, and close the connection."""
        self._malformed = reason
        self._disarm()
        if self._reading == _BODY and self.cycle is not None:
            # Refused in the newest request's body: that request is never answered (its handler
            # would wait for the rest of the body with no deadline running), so the 400 waits
            # only for the requests before it; one still queued behind them never starts.
            self._broken = self.cycle
            if self.pipeline and self.pipeline[0][0] is self.cycle:
                self.pipeline.popleft()
        self.limits.warn("malformed HTTP request refused", self.loop.time(), status=400, reason=reason)
        if self._answered():
            self._send_malformed()
        else:
            self.flow.pause_reading()

    def _send_malformed(self) -> None:
        if self.transport.is_closing():
            return
        self._flush()  # what an earlier response wrote goes first
        if self._not_served:  # no resource here allows it: an empty Allow (RFC 9110 10.2.1)
            why = self._malformed or ""
            self.transport.write(plain_response(405, "Method Not Allowed", "method_not_allowed", why, "allow: \r\n"))
            self.transport.close()
            return
        self.send_400_response(f"Invalid HTTP request received. {self._malformed}")

    # -- the read deadlines --------------------------------------------------------------------------

    def _follow(self) -> None:
        """Move the deadline along with the request's progress (after each read)."""
        reading = self._reading
        if reading == _HEAD:
            if self._waiting_for != "headers":
                self._arm("headers")  # a kept-alive connection's next request has begun
        elif reading == _BODY:
            if self._waiting_for != "body":
                self._arm("body")
        elif self._waiting_for == "body":
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
        if self.flow.read_paused or (what == "headers" and not self._answered()):
            # The proxy stopped reading (a pipelined request waits for the one before it, or a
            # body for its handler), or is still answering the requests before this head: the
            # client is not the one who is late (and a 408 now would read as their answer).
            self._arm(what)
            return
        seconds = self.limits.header_timeout if what == "headers" else self.limits.body_timeout
        flag = "--header-timeout" if what == "headers" else "--body-timeout"
        message = f"the request's {what} did not arrive within {seconds:g} s ({flag}); the connection is closed"
        self.limits.warn("slow client's connection closed", self.loop.time(), status=408, waiting_for=what)
        self._flush()
        cycle = self.cycle
        if not self.pipeline and (cycle is None or cycle.response_complete or not cycle.response_started):
            # Written past the parser: no request is complete to be answered through it.
            self.transport.write(plain_response(408, "Request Timeout", "request_timeout", message))
        self.transport.close()

    def _refuse(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._refusal is not None and not self.transport.is_closing():
            self.transport.write(self._refusal)
            self.transport.close()


def _method_at(data: bytes, start: int) -> tuple[int, str] | None:
    """The method of the request that begins at `start` in `data` (a token, as h11 required),
    and where it ends; None when no whole token and a space begin it there."""
    while start < len(data) and data[start] in b"\r\n":  # llhttp passes over empty lines before a request
        start += 1
    end = data.find(b" ", start)
    if end < 0 or not _TOKEN.fullmatch(data, start, end):
        return None
    return end, data[start:end].decode("ascii")


def _start_of(head: bytes, view: memoryview, at: int, complete: int) -> int:
    """Where in `view` the request after the first `complete` ones of `head` + `view[at:]`
    (which begins where a request begins) begins: after the shortest part of it in which a parser
    of its own completes them. Looked for from `at` in steps that double, then halved, so that
    finding it parses a few times the length of those requests, not of all that follows."""

    def completed(size: int) -> int:
        counted = _Completions()
        parser = httptools.HttpRequestParser(counted)
        parser.set_dangerous_leniencies(lenient_data_after_close=True)
        try:
            if head:
                parser.feed_data(head)
            parser.feed_data(view[at : at + size])
        except httptools.HttpParserError:
            pass  # what follows them (the request llhttp refused) is not this count's concern
        return counted.complete

    if complete <= 0:
        return at
    rest = len(view) - at
    low, high = 0, min(_FIRST_STEP, rest)
    while high < rest and completed(high) < complete:
        low, high = high + 1, min(2 * high, rest)
    while low < high:
        middle = (low + high) // 2
        if completed(middle) >= complete:
            high = middle
        else:
            low = middle + 1
    return at + low


def _carries_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers announce a body (a Content-Length over 0, or chunked)."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip(b" \t0")):
            return True
    return False


def _head_too_large() -> str:
    return f"the request line and headers are over {MAX_HEAD_BYTES} bytes"


def limited_protocol(limits: ConnectionLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class for uvicorn's `http=`, counting against `limits`."""
    return type("LimitedHttpToolsProtocol", (LimitedHttpToolsProtocol,), {"limits": limits})
