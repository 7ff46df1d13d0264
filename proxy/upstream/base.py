"""What every upstream connection shares, whatever carries its messages.

    UpstreamBase                 request ids, progress tokens, related streams, era negotiation,
    │                            the initialize replay, routing of what the server sends unasked,
    │                            restart backoff
    ├── UpstreamConnection       (stdio.py) a child process over stdio
    └── HttpUpstreamConnection   (http.py) a remote server over HTTP

Links and the session see only this surface: `name`, `era`, `modern`, `running`,
`discover_result`, `initialize_result`, `initialize_params`, `generation`, `ensure_ready()`,
`initialize()`, `request()`, `answers()`, `notify()`, `send_reply()`, `state()`, `shutdown()`, the
`on_server_request` / `on_notification` callbacks, `follow_client()` / `client_speaks()` and
`async with`. A connection that cannot be reached raises `UpstreamDown`.

The era. A connection shared by several clients probes `server/discover` and falls back to the
session era. A connection that serves one client alone (the stdio wrap, a session-era HTTP
session's own) follows that client: its era is chosen when the client's era is known (its first
message, or the session it opens). A session-era client's upstream is addressed through the
client's own `initialize` first, so that a dual-era server serves it in its own era (server to
client requests and all); only when the upstream refuses it is `server/discover` asked. A
connection that session-era HTTP sessions share (upstream.shared) follows them alike: they all
speak the session era, and it is initialized once, with what they all declared.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import anyio
import anyio.abc
import msgspec

from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame

log = logging.getLogger("frugal_proxy.upstream")

Era = Literal["modern", "legacy"]
ProgressHandler = Callable[[dict[str, msgspec.Raw]], Awaitable[None]]
ServerRequestHandler = Callable[["UpstreamBase", Frame], Awaitable[None]]
NotificationHandler = Callable[["UpstreamBase", Frame], Awaitable[None]]
RelatedHandler = Callable[[Frame], Awaitable[None]]
# Told that the server closed a request's response stream before its reply, which the connection
# then resumes (Streamable HTTP in the session era, SEP-1699's polling).
CutHandler = Callable[[], None]

# How far a request a caller watches got (`watching`): "sent" once it is handed to the upstream's
# writer (the stdio pipe's write begins, the HTTP POST's body is handed to the connection),
# "refused" when the server refused it with a failure status.
Reached = Literal["sent", "refused"]


@dataclass(eq=False)
class _Watch:
    """A `watching` block: the method it watches, and its watcher while the block lasts (a task
    started inside it, which inherits the context variable, may outlive it)."""

    method: str
    watcher: Callable[[Reached], None] | None


_WATCHING: contextvars.ContextVar[_Watch | None] = contextvars.ContextVar("upstream_watching", default=None)

LATE_PROBE_WAIT = 10.0
# How long a remote upstream whose URL accepts connections may take to answer the era probe before
# the proxy serves it in the session era, with a warning: a server on a busy machine took 14-20 s
# (past --probe-timeout it is asked again). Over stdio the probe is never withdrawn instead: past
# --probe-timeout initialize waits LATE_PROBE_WAIT more for it, then goes after it in the pipe.
START_UP_DEADLINE = 60.0
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
HEALTHY_AFTER = 60.0
MAX_WAIT_FOR_RESTART = 1.0  # a request waits out a backoff this short; a longer one fails at once
PROXY_CLIENT_INFO = {"name": "frugal-proxy", "version": "0.1.0"}


@dataclass(eq=False)
class Pending:
    """A request waiting for its reply. Its event is asyncio's own (anyio's wrapper costs a
    wrapper object and a checkpoint per call, and cancel scopes reach this wait alike), made
    only when a task waits: a request settled through `on_settled` has nobody waiting."""

    method: str
    reply: Frame | None = None
    failure: Exception | None = None
    progress_token: int | None = None
    sent: bool = False  # whether the request went out: only then is a cancellation sent after it
    # A request started without a waiting task (`start_request`): awaited by the reader once the
    # reply or the failure is in, in place of a task woken to take it.
    on_settled: Callable[[Pending], Coroutine[Any, Any, None]] | None = None
    upstream_id: int | None = None  # set for such a request, which `withdraw` takes back by it
    settled: bool = False  # its reply or its failure is in
    watcher: Callable[[Reached], None] | None = None  # told how far it got (`watching`)
    _event: asyncio.Event | None = field(default=None, repr=False)

    def mark_sent(self) -> None:
        self.sent = True
        if self.watcher is not None:
            self.watcher("sent")

    def mark_refused(self) -> None:
        """The server answered it with a failure status: it was refused, not served."""
        if self.watcher is not None:
            self.watcher("refused")

    def set_done(self) -> None:
        """The reply or the failure is in: wake the task waiting for it, if one is."""
        self.settled = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Wait until `set_done` (at once, without a checkpoint, if it was called already)."""
        if self.settled:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()


class UpstreamBase(abc.ABC):
    """One upstream MCP server, however it is reached."""

    # How an UpstreamDown message says the connection comes back ("it restarts on the next request").
    RETRY_VERB: ClassVar[str] = "restarts"

    def __init__(
        self,
        *,
        name: str,
        probe_timeout: float,
        on_server_request: ServerRequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> None:
        self.name = name
        self.probe_timeout = probe_timeout
        self.on_server_request = on_server_request
        self.on_notification = on_notification
        # Told when the reader has several messages ready at once: what answering them writes to
        # the client may go out together at the end of the loop turn (DownstreamPeer.hold).
        self.on_burst: Callable[[], None] | None = None
        self.era: Era | None = None
        self.discover_result: dict[str, Any] | None = None
        self.initialize_result: dict[str, Any] | None = None
        self.initialize_params: Any = None
        self.generation = 0
        # Whether the era follows the one client this connection serves, and that client's era
        # once known; `_assumed`: "legacy" taken on the client's word until initialize answers.
        self.follows_client = False
        self.client_era: Era | None = None
        self._assumed = False
        self._refused_session = False  # it refused initialize and answered discover: modern only
        self._first_outcome = anyio.Event()  # the first era chosen, or the first start failed
        self._ids = itertools.count(1)
        self._progress: dict[int, ProgressHandler] = {}
        self._related: dict[int, RelatedHandler] = {}
        self._abandoned: set[int] = set()
        # A discover probe still waiting for its answer (see UpstreamConnection._probe_discover),
        # and whether this run of the upstream has accepted an initialize (then a late discover
        # answer must not switch it to the modern era: its session is established).
        self._probe_settled = anyio.Event()
        self._probe_settled.set()
        self._session_open = False
        self._start_lock = anyio.Lock()
        self._failures = 0
        self._next_start = 0.0
        self._last_down: UpstreamDown | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    # -- what each transport provides ------------------------------------------------------------

    @property
    @abc.abstractmethod
    def running(self) -> bool:
        """Whether it is connected, so that a request can be sent now; the era may still be under
        negotiation (`ensure_ready` waits for that)."""

    @abc.abstractmethod
    async def _start(self) -> None:
        """Connect (or spawn), then negotiate the era; raise UpstreamDown on failure."""

    @abc.abstractmethod
    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_progress: ProgressHandler | None = None,
        on_related: RelatedHandler | None = None,
        headers: Mapping[str, str] | None = None,
        on_cut: CutHandler | None = None,
    ) -> Frame:
        """Send a request and wait for its reply frame (a result or an error). `headers` are the
        client's own request headers that go on with it where the transport has headers (the
        `Mcp-Param-*` of an HTTP client's tools/call); stdio has none. `on_cut` is told each
        time the server closes the request's stream before its reply (where a transport has
        such streams: Streamable HTTP), before the connection resumes it."""

    def start_request(
        self,
        method: str,
        params: Any,
        on_settled: Callable[[Pending], Coroutine[Any, Any, None]],
        *,
        on_progress: ProgressHandler | None = None,
    ) -> Pending | None:
        """Send a request at once without a task waiting for it: `on_settled` gets its Pending
        (with `reply` or `failure`) from the reader, and `withdraw` takes it back. None, with
        nothing sent, when it cannot go out at once; the caller then uses `request`. A transport
        that has no such path (this default) always says None."""
        return None

    async def settle(self, pending: Pending) -> None:
        """Run a started request's `on_settled` from this connection's reader, its progress
        token's registration undone first: whatever goes wrong answering it is that call's
        (logged), never the reader's, which serves the rest."""
        assert pending.on_settled is not None
        if pending.upstream_id is not None:
            self._close(pending.upstream_id, pending)
        try:
            await pending.on_settled(pending)
        except Exception as exc:
            log.warning(
                "answering a call from the upstream's reader failed",
                extra={"upstream": self.name, "error": f"{type(exc).__name__}: {str(exc)[:200]}"},
            )

    def hold_writes(self) -> None:  # noqa: B027 - a no-op default
        """More requests follow in this loop turn: where the transport can, they go out together
        when the turn ends (a stdio child's pipe; a no-op elsewhere)."""

    async def withdraw(self, pending: Pending, reason: str) -> None:  # noqa: B027 - a no-op default
        """Give up on a request from `start_request`: it is not settled, and the server is told
        (`notifications/cancelled`) when it went out."""

    @property
    def settled(self) -> bool:
        """Running with its era chosen, no start under way: `ensure_ready` would return at once."""
        return self.running and not self._start_lock.locked() and not self._era_due()

    @abc.abstractmethod
    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification."""

    @abc.abstractmethod
    async def send_reply(self, frame: Frame) -> None:
        """Answer a server-to-client request (its id unchanged)."""

    @abc.abstractmethod
    async def shutdown(self) -> None:
        """End the connection."""

    @abc.abstractmethod
    def state(self) -> dict[str, object]:
        """What `frugal-proxy status` shows of this upstream."""

    # -- lifetime --------------------------------------------------------------------------------

    async def __aenter__(self) -> UpstreamBase:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        await self.shutdown()
        assert self._tg is not None
        return await self._tg.__aexit__(*exc_info)  # type: ignore[arg-type]

    @property
    def modern(self) -> bool:
        """Whether it speaks 2026-07-28 (this can change once, when a late discover answer arrives)."""
        return self.era == "modern"

    def follow_client(self, era: Era | None = None) -> None:
        """Serve one client alone, in its era: `era` when it is known already (a session-era
        HTTP session), else the one its first message shows (`client_speaks`). Call it before
        the connection starts."""
        self.follows_client = True
        self.client_era = era

    def client_speaks(self, era: Era | None) -> None:
        """The era of the client a request comes from; a connection that follows its client
        takes the first one it hears, and negotiates in it on `ensure_ready`."""
        if self.follows_client and self.client_era is None and era is not None:
            self.client_era = era

    def _era_due(self) -> bool:
        """Connected, following a client whose era is now known, and no era chosen yet."""
        return self.follows_client and self.era is None and self.client_era is not None and self.running

    async def ensure_ready(self) -> None:
        """Start (or restart) and negotiate, unless it is already running; while another task
        is starting it, wait until the era is negotiated (a connection is `running` as soon as
        it can carry the discover probe, before the era is known). A connection that follows
        its client negotiates once the client's era is known."""
        if self.running and not self._start_lock.locked() and not self._era_due():
            return
        async with self._start_lock:
            if self.running:
                if self._era_due():
                    await self._negotiate()
                return
            wait = self._next_start - time.monotonic()
            if wait > MAX_WAIT_FOR_RESTART:
                raise self._down_error()  # fail fast; the backoff says when to try again
            if wait > 0:
                await anyio.sleep(wait)
            await self._start()

    def _record_down(self, reason: str, tail: list[str], *, healthy: bool = False, at_least: float = 0.0) -> None:
        """Remember why it is down and when to try again (0.5 s doubling to 30 s; a healthy run
        resets the count; `at_least` honours a server's Retry-After)."""
        if self.era is None:
            self._first_outcome.set()  # down before any era was chosen: it did not start
        self._failures = 0 if healthy else self._failures + 1
        backoff = min(BACKOFF_FIRST * 2 ** max(self._failures - 1, 0), BACKOFF_MAX) if self._failures else 0.0
        self._next_start = time.monotonic() + max(backoff, at_least)
        self._last_down = UpstreamDown(self.name, reason, tail, verb=self.RETRY_VERB)

    def _down_error(self) -> UpstreamDown:
        if self._last_down is not None:
            retry_in = max(0.0, self._next_start - time.monotonic())
            last = self._last_down
            return UpstreamDown(self.name, last.reason, last.stderr_tail, retry_in, verb=self.RETRY_VERB)
        return UpstreamDown(self.name, "not started", [], verb=self.RETRY_VERB)

    def _down_state(self) -> dict[str, object]:
        if self._last_down is not None:
            retry_in = max(0.0, self._next_start - time.monotonic())
            return {"state": "down", "reason": str(self._last_down), "retry_in_s": round(retry_in, 1)}
        return {"state": "not started"}

    async def answers(self, within: float, *, quiet: bool = False) -> bool:
        """Whether it answers a probe within `within` seconds: `ping` in the session era,
        `server/discover` (the era's own request) in 2026-07-28. An error reply is an answer;
        a connection that is not running does not answer. A miss is logged unless `quiet` (a
        caller that says only what changes)."""
        if not self.running or self.era is None:
            return False
        method, params = ("server/discover", self.discover_params()) if self.modern else ("ping", None)
        with anyio.move_on_after(within):
            try:
                await self.request(method, params)
            except UpstreamError:
                return False
            return True
        if not quiet:
            log.warning("upstream did not answer a health probe", extra={"upstream": self.name, "seconds": within})
        return False

    # -- negotiation -----------------------------------------------------------------------------

    @staticmethod
    def discover_params() -> dict[str, Any]:
        """The params of the proxy's own `server/discover` probe."""
        return {
            "_meta": {
                eras.META_VERSION: eras.LATEST_MODERN,
                eras.META_CAPABILITIES: eras.BRIDGED_CLIENT_CAPABILITIES,
                eras.META_CLIENT_INFO: PROXY_CLIENT_INFO,
            }
        }

    async def _negotiate(self) -> None:
        """Choose the era, once it can be chosen (a transport calls this once it is connected).
        A connection that follows its client waits for the client's era; a session-era client's
        upstream is taken for session-era until its answer to initialize says otherwise (the
        restart of a session replays its initialize); anyone else's is probed."""
        if self.follows_client:
            if self.client_era is None:
                return  # chosen when the client's first message arrives (ensure_ready)
            if self.client_era == "legacy" and not self._refused_session:
                self.era = "legacy"
                self._assumed = True
                self._first_outcome.set()
                self._address_in_session_era()
                log.info("upstream addressed in the session era, as its client is", extra={"upstream": self.name})
                if self.initialize_params is not None:
                    await self._initialize(self.initialize_params)
                return
        await self._settle(await self._discover())
        self._first_outcome.set()

    async def started_or_down(self) -> UpstreamDown | None:
        """Wait until the first start has chosen an era (None) or failed before it could (why):
        a connection that follows its client is only spawned until the client speaks, and one
        that exits before that did not start."""
        await self._first_outcome.wait()
        return self._down_error() if self.era is None else None

    async def _discover(self) -> dict[str, Any] | None:
        """What `server/discover` says of the upstream: its DiscoverResult, None for the session
        era (a transport that probes while connecting says what it found)."""
        return None

    def _address_in_session_era(self) -> None:  # noqa: B027 - a no-op default hook
        """A hook for what a transport changes to send the session era's initialize."""

    async def _settle(self, discovered: dict[str, Any] | None) -> None:
        """Adopt what the probe found: modern with its discover result, else the session era
        (replaying the last initialize, so a restart is invisible to the client)."""
        if discovered is not None:
            self._become_modern(discovered)
            return
        self.era = "legacy"
        log.info("upstream speaks the session era", extra={"upstream": self.name})
        if self.initialize_params is not None:
            reply = await self._initialize(self.initialize_params)
            if "error" in reply and self.era == "legacy":
                log.warning("upstream refused re-initialize", extra={"upstream": self.name})

    def _become_modern(self, discovered: dict[str, Any]) -> None:
        self.era = "modern"
        self.discover_result = discovered
        log.info("upstream speaks 2026-07-28", extra={"upstream": self.name})

    @property
    def session_open(self) -> bool:
        """Whether a session-era upstream has accepted initialize since it (re)started."""
        return self._session_open

    async def initialize(self, params: Any) -> Frame:
        """Initialize a session-era upstream; the params are kept and replayed after a restart."""
        await self.ensure_ready()
        self.initialize_params = params
        return await self._initialize(params)

    async def reinitialize(self, params: Any) -> Frame:
        """Initialize an established session-era upstream again, with params that declare more
        (over HTTP a new session; over stdio the same process is asked again)."""
        await self.ensure_ready()
        self.initialize_params = params
        await self._before_reinitialize()
        return await self._initialize(params)

    async def _before_reinitialize(self) -> None:  # noqa: B027 - a no-op default hook
        """A hook for what a transport ends before initializing again (an HTTP session)."""

    async def _initialize(self, params: Any) -> Frame:
        if not self._probe_settled.is_set():
            # The discover probe timed out but may still be answered; a dual-era server that
            # answers it after accepting initialize would refuse the session's requests. Sending
            # initialize only once the probe has settled (or after a bounded wait) closes that race.
            with anyio.move_on_after(LATE_PROBE_WAIT):
                await self._probe_settled.wait()
            if self.era == "modern":
                message = "the upstream answered server/discover: it is served statelessly"
                return jsonrpc.error(None, jsonrpc.INVALID_REQUEST, message)
        reply = await self.request("initialize", params)
        if self._assumed:
            self._assumed = False
            if "result" not in reply:
                # Refused: a server that speaks only 2026-07-28 (it answers discover) is served
                # statelessly; any other refusal is the session-era server's own answer.
                found = await self._discover()
                if found is not None:
                    self._refused_session = True  # after a restart it is probed, not initialized
                    self._become_modern(found)
                    return reply
        if "result" not in reply and not self._probe_settled.is_set():
            # A dual-era server refuses initialize once it has answered the discover probe; its
            # answer may still be on its way. Let it land, so the caller sees the modern era.
            with anyio.move_on_after(LATE_PROBE_WAIT):
                await self._probe_settled.wait()
        if "result" in reply:
            if not self._probe_settled.is_set():
                log.warning(
                    "upstream accepted initialize with server/discover unanswered: it is served in the "
                    "session era (a slow start? raise --probe-timeout)",
                    extra={"upstream": self.name, "probe_timeout": self.probe_timeout},
                )
            self._session_open = True
            self.era = "legacy"
            body = jsonrpc.decode_any(reply["result"])
            self.initialize_result = body if isinstance(body, dict) else {}
            await self._initialized(self.initialize_result)
            await self.notify("notifications/initialized")
        return reply

    async def _initialized(self, result: dict[str, Any]) -> None:  # noqa: B027 - a no-op default hook
        """A hook for what a transport does once a session is established (before `initialized`)."""

    # -- request bookkeeping ---------------------------------------------------------------------

    def _open(
        self,
        params: Any,
        on_progress: ProgressHandler | None,
        on_related: RelatedHandler | None,
        method: str,
    ) -> tuple[int, Any, Pending]:
        """A fresh upstream id for a request, its params with the progress token mapped, and the
        Pending that collects its reply; `_close` undoes the registrations."""
        upstream_id = next(self._ids)
        pending = Pending(method)
        watch = _WATCHING.get()
        if watch is not None and watch.method == method:
            pending.watcher = watch.watcher
        if on_progress is not None and isinstance(params, dict):
            params, pending.progress_token = self._map_progress(params, upstream_id)
            if pending.progress_token is not None:
                self._progress[pending.progress_token] = on_progress
        if on_related is not None:
            self._related[upstream_id] = on_related
        return upstream_id, params, pending

    def _close(self, upstream_id: int, pending: Pending) -> None:
        self._related.pop(upstream_id, None)
        if pending.progress_token is not None:
            self._progress.pop(pending.progress_token, None)

    @staticmethod
    def _map_progress(params: dict[str, Any], upstream_id: int) -> tuple[dict[str, Any], int | None]:
        meta = params.get("_meta")
        if isinstance(meta, msgspec.Raw):
            meta = jsonrpc.decode_any(meta)
        if not isinstance(meta, dict) or "progressToken" not in meta:
            return params, None
        mapped = dict(params)
        mapped["_meta"] = {**meta, "progressToken": upstream_id}
        return mapped, upstream_id

    # -- what the server sends -------------------------------------------------------------------

    async def _deliver(self, frame: Frame, pending: dict[int, Pending], message: Any = None) -> None:
        """Route one message from the server: a reply to its waiting request, a server request
        to the link, progress and related notifications to the request they belong to, any other
        notification to the link. A message whose values cannot be used is dropped with a
        warning: the reading goes on. `message` is the frame's whole message as its line's check
        decoded it (`Frames.messages`), when the reader has it: its id is not decoded again."""
        try:
            await self._route(frame, pending, message)
        except jsonrpc.MessageError as exc:
            log.warning(
                "upstream sent a message the proxy cannot use; dropped",
                extra={"upstream": self.name, "method": jsonrpc.method_of(frame), "reason": str(exc)[:200]},
            )

    def _unusable(self, pending: dict[int, Pending], error: jsonrpc.MessageError) -> None:
        """A line that is not a usable message: the request it answers (when it is a reply whose
        id can be read) fails with an UpstreamError that says why; the connection is kept."""
        ident = error.request_id
        waiting = pending.pop(ident, None) if error.reply and isinstance(ident, int) else None
        if waiting is not None:
            waiting.failure = unusable_reply(self.name, str(error))
            self._settle_soon(waiting)

    def _settle_soon(self, waiting: Pending) -> None:
        """Wake what waits for a request settled outside the reader's own await."""
        waiting.set_done()
        if waiting.on_settled is not None:
            assert self._tg is not None
            self._tg.start_soon(self.settle, waiting)  # what goes wrong there is that call's alone

    async def _route(self, frame: Frame, pending: dict[int, Pending], message: Any = None) -> None:
        if jsonrpc.is_reply(frame):
            # The checked message's id is a string, an integer or None, as `id_of` reads it.
            ident = message.get("id") if message is not None else jsonrpc.id_of(frame)
            waiting = pending.pop(ident, None) if isinstance(ident, int) else None
            if waiting is None:
                if isinstance(ident, int) and ident in self._abandoned:
                    self._abandoned.discard(ident)
                    return
                log.warning(
                    "upstream answered a request nobody sent; dropped",
                    extra={"upstream": self.name, "id": str(ident)[:40]},
                )
                return
            waiting.reply = frame
            waiting.set_done()
            if waiting.on_settled is not None:
                await self.settle(waiting)  # the reply goes on from here: no task to wake
            return
        method = jsonrpc.method_of(frame)
        if jsonrpc.is_request(frame):
            if self.on_server_request is not None:
                await self.on_server_request(self, frame)
            else:
                await self.send_reply(
                    jsonrpc.error(jsonrpc.id_of(frame), jsonrpc.METHOD_NOT_FOUND, f"{method} not supported")
                )
            return
        if method == "notifications/progress" and await self._route_progress(frame):
            return
        if method == "notifications/cancelled":
            return  # the upstream cancelling its own server-to-client request: nothing pending here
        if self._related and await self._route_related(frame):
            return
        if self.on_notification is not None:
            await self.on_notification(self, frame)

    async def _route_progress(self, frame: Frame) -> bool:
        params = jsonrpc.params_of(frame)
        token = jsonrpc.decode_any(params["progressToken"]) if "progressToken" in params else None
        handler = self._progress.get(token) if isinstance(token, int) else None
        if handler is None:
            return False
        await handler(params)
        return True

    async def _route_related(self, frame: Frame) -> bool:
        params = frame.get("params")
        if params is None or b"subscriptionId" not in bytes(params):
            return False
        meta = jsonrpc.sub_object(jsonrpc.params_of(frame), "_meta")
        value = meta.get(eras.META_SUBSCRIPTION_ID)
        ident = jsonrpc.decode_any(value) if value is not None else None
        handler = self._related.get(ident) if isinstance(ident, int) else None
        if handler is None:
            return False
        await handler(frame)
        return True


@contextlib.contextmanager
def watching(method: str, watcher: Callable[[Reached], None]) -> Iterator[None]:
    """While in it, each `method` request this task (or a task it starts) sends upstream tells
    `watcher` how far it got: "sent" once handed to the connection's writer, "refused" when the
    server refused it with a failure status. A provider that is an upstream's tool learns so
    whether its call may have reached the server (and may have been billed); the requests the
    connection makes on its own way there (starting, discover, initialize) are not watched."""
    watch = _Watch(method, watcher)
    token = _WATCHING.set(watch)
    try:
        yield
    finally:
        watch.watcher = None
        _WATCHING.reset(token)


def unusable_reply(name: str, reason: str) -> UpstreamError:
    """The error of a request whose reply the upstream sent in a form the proxy cannot carry."""
    return UpstreamError(f"upstream {name!r} sent a reply the proxy cannot use: {reason}")


def discovered(reply: Frame | None) -> dict[str, Any] | None:
    """The DiscoverResult in a reply, if it is one that names the modern version."""
    if reply is None or "result" not in reply:
        return None
    body = jsonrpc.decode_any(reply["result"])
    if not isinstance(body, dict) or not isinstance(body.get("supportedVersions"), list):
        return None
    return body if eras.LATEST_MODERN in body["supportedVersions"] else None
