"""One upstream MCP server over stdio: its process, its request ids, its era.

`UpstreamConnection` owns the child process and everything tied to its lifetime:

- request ids are rewritten into the connection's own integer space and mapped back, so that
  several callers (and the proxy itself) never collide; so are progress tokens;
- a caller that is cancelled sends `notifications/cancelled` for its upstream id;
- era detection follows the spec: probe `server/discover`, and fall back to the session era on
  any error or on a short timeout (never on one particular error code);
- a session-era upstream is initialized with whatever params the session chose (the client's
  own, passed through, or the proxy's), and re-initialized with the same params after a restart;
- when the process dies every pending request fails at once with `UpstreamDown`, naming the exit
  status and the last lines of its stderr; the next request restarts it after a backoff
  (0.5 s doubling to 30 s, reset once a process has stayed up for a minute).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import anyio.abc
import msgspec

from frugal_proxy import eras, jsonrpc
from frugal_proxy.errors import UpstreamDown
from frugal_proxy.jsonrpc import Frame
from frugal_proxy.transports.child import ChildProcess, ChildStartError
from frugal_proxy.transports.lines import BadLine, FrameReader, FrameWriter

log = logging.getLogger("frugal_proxy.upstream")

Era = Literal["modern", "legacy"]
ProgressHandler = Callable[[dict[str, msgspec.Raw]], Awaitable[None]]
ServerRequestHandler = Callable[["UpstreamConnection", Frame], Awaitable[None]]
NotificationHandler = Callable[["UpstreamConnection", Frame], Awaitable[None]]
RelatedHandler = Callable[[Frame], Awaitable[None]]

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
HEALTHY_AFTER = 60.0
MAX_WAIT_FOR_RESTART = 1.0  # a request waits out a backoff this short; a longer one fails at once
PROXY_CLIENT_INFO = {"name": "frugal-proxy", "version": "0.1.0"}


@dataclass(eq=False)
class _Pending:
    method: str
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: Frame | None = None
    failure: Exception | None = None
    progress_token: int | None = None


@dataclass(eq=False)
class _Generation:
    """One run of the upstream process and what lives and dies with it."""

    child: ChildProcess
    writer: FrameWriter
    started_at: float
    pending: dict[int, _Pending] = field(default_factory=dict)
    dead: bool = False


class UpstreamConnection:
    """A restartable connection to one stdio MCP server."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        name: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        probe_timeout: float = 3.0,
        max_line_bytes: int = 64 * 1024 * 1024,
        on_server_request: ServerRequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> None:
        self.command = list(command)
        self.name = name
        self.env = env or {}
        self.cwd = cwd
        self.probe_timeout = probe_timeout
        self.max_line_bytes = max_line_bytes
        self.on_server_request = on_server_request
        self.on_notification = on_notification
        self.era: Era | None = None
        self.discover_result: dict[str, Any] | None = None
        self.initialize_result: dict[str, Any] | None = None
        self.initialize_params: Any = None
        self._ids = itertools.count(1)
        self._progress: dict[int, ProgressHandler] = {}
        self._related: dict[int, RelatedHandler] = {}
        self._abandoned: set[int] = set()
        self._gen: _Generation | None = None
        self._start_lock = anyio.Lock()
        self._failures = 0
        self._next_start = 0.0
        self._last_down: UpstreamDown | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self.generation = 0

    # -- lifetime --------------------------------------------------------------------------------

    async def __aenter__(self) -> UpstreamConnection:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        await self.shutdown()
        assert self._tg is not None
        return await self._tg.__aexit__(*exc_info)  # type: ignore[arg-type]

    def state(self) -> dict[str, object]:
        """What `frugal-proxy status` shows of this upstream."""
        if self.running:
            assert self._gen is not None
            return {
                "state": "up",
                "era": self.era,
                "pid": self._gen.child.pid,
                "restarts": self.generation - 1,
            }
        if self._last_down is not None:
            retry_in = max(0.0, self._next_start - time.monotonic())
            return {"state": "down", "reason": str(self._last_down), "retry_in_s": round(retry_in, 1)}
        return {"state": "not started"}

    @property
    def modern(self) -> bool:
        """Whether it speaks 2026-07-28 (this can change once, when a late discover answer arrives)."""
        return self.era == "modern"

    @property
    def running(self) -> bool:
        return self._gen is not None and not self._gen.dead

    async def shutdown(self) -> None:
        """Stop the process: stdin closed, SIGTERM after a grace period, SIGKILL after another."""
        gen = self._gen
        if gen is None or gen.dead:
            return
        with anyio.CancelScope(shield=True):
            await gen.writer.close()
            await gen.child.terminate()

    async def ensure_ready(self) -> None:
        """Start (or restart) the process and negotiate, unless it is already running."""
        if self.running:
            return
        async with self._start_lock:
            if self.running:
                return
            wait = self._next_start - time.monotonic()
            if wait > MAX_WAIT_FOR_RESTART:
                raise self._down_error()  # fail fast; the backoff says when to try again
            if wait > 0:
                await anyio.sleep(wait)
            await self._start()

    async def _start(self) -> None:
        assert self._tg is not None
        try:
            child = await ChildProcess.spawn(self.command, self.name, self.env, self.cwd)
        except ChildStartError as exc:
            self._failures += 1
            backoff = min(BACKOFF_FIRST * 2 ** (self._failures - 1), BACKOFF_MAX)
            self._next_start = time.monotonic() + backoff
            self._last_down = UpstreamDown(self.name, exc.strerror or str(exc), [])
            raise self._down_error() from None
        gen = _Generation(child=child, writer=FrameWriter(child), started_at=time.monotonic())
        self._gen = gen
        self.generation += 1
        log.info("upstream started", extra={"upstream": self.name, "pid": child.pid})
        self._tg.start_soon(child.pump_stderr)
        self._tg.start_soon(self._read_loop, gen)
        await self._negotiate()

    async def _negotiate(self) -> None:
        probe = await self._probe_discover()
        if probe is not None:
            self._become_modern(probe)
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

    async def _probe_discover(self) -> dict[str, Any] | None:
        """Ask `server/discover`; None means the session era (an error, or no answer in time).

        The probe is never withdrawn: a slow server (one still importing its modules, say) that
        answers after the timeout is recognised as modern then, even though the proxy has moved
        on; a dual-era server refuses `initialize` once it has answered a modern request.
        """
        params = {
            "_meta": {
                eras.META_VERSION: eras.LATEST_MODERN,
                eras.META_CAPABILITIES: eras.BRIDGED_CLIENT_CAPABILITIES,
                eras.META_CLIENT_INFO: PROXY_CLIENT_INFO,
            }
        }
        answered = anyio.Event()
        outcome: list[dict[str, Any] | None] = []
        generation = self.generation

        died: list[UpstreamDown] = []

        async def probe() -> None:
            try:
                reply = await self.request("server/discover", params)
            except UpstreamDown as exc:
                died.append(exc)  # it exited before answering: that is no era, it is a failed start
                reply = None
            outcome.append(_discovered(reply))
            answered.set()
            if self.generation == generation and self.era == "legacy" and outcome[0] is not None:
                log.info("upstream answered server/discover late", extra={"upstream": self.name})
                self._become_modern(outcome[0])

        assert self._tg is not None
        self._tg.start_soon(probe)
        with anyio.move_on_after(self.probe_timeout):
            await answered.wait()
        if died:
            raise died[0]
        if not answered.is_set() and not self.running:
            raise self._down_error()
        return outcome[0] if outcome else None

    async def initialize(self, params: Any) -> Frame:
        """Initialize a session-era upstream; the params are kept and replayed after a restart."""
        await self.ensure_ready()
        self.initialize_params = params
        return await self._initialize(params)

    async def _initialize(self, params: Any) -> Frame:
        reply = await self.request("initialize", params)
        if "result" in reply:
            body = jsonrpc.decode_any(reply["result"])
            self.initialize_result = body if isinstance(body, dict) else {}
            await self.notify("notifications/initialized")
        return reply

    # -- requests --------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_progress: ProgressHandler | None = None,
        on_related: RelatedHandler | None = None,
        abandon_quietly: bool = False,
    ) -> Frame:
        """Send a request and wait for its reply frame (a result or an error).

        `on_progress` gets the request's progress notifications, `on_related` the notifications
        of the stream it opens (those tagged with its id as their subscription id). Raises
        UpstreamDown when the process is gone or dies first. Cancelling the caller sends
        `notifications/cancelled` upstream.
        """
        gen = self._gen
        if gen is None or gen.dead:
            raise self._down_error()
        upstream_id = next(self._ids)
        pending = _Pending(method)
        if on_progress is not None and isinstance(params, dict):
            params, pending.progress_token = self._map_progress(params, upstream_id)
            if pending.progress_token is not None:
                self._progress[pending.progress_token] = on_progress
        gen.pending[upstream_id] = pending
        if on_related is not None:
            self._related[upstream_id] = on_related
        try:
            await gen.writer.send(jsonrpc.request(upstream_id, method, params))
            await pending.done.wait()
        except anyio.get_cancelled_exc_class():
            if gen.pending.pop(upstream_id, None) is not None:
                if abandon_quietly:
                    self._abandoned.add(upstream_id)
                else:
                    with anyio.CancelScope(shield=True):
                        await self._send_cancel(gen, upstream_id)
            raise
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            gen.pending.pop(upstream_id, None)
            raise self._down_error() from None
        finally:
            self._related.pop(upstream_id, None)
            if pending.progress_token is not None:
                self._progress.pop(pending.progress_token, None)
        if pending.failure is not None:
            raise pending.failure
        assert pending.reply is not None
        return pending.reply

    def _map_progress(self, params: dict[str, Any], upstream_id: int) -> tuple[dict[str, Any], int | None]:
        meta = params.get("_meta")
        if isinstance(meta, msgspec.Raw):
            meta = jsonrpc.decode_any(meta)
        if not isinstance(meta, dict) or "progressToken" not in meta:
            return params, None
        mapped = dict(params)
        mapped["_meta"] = {**meta, "progressToken": upstream_id}
        return mapped, upstream_id

    async def _send_cancel(self, gen: _Generation, upstream_id: int) -> None:
        if gen.dead:
            return
        self._abandoned.add(upstream_id)
        params = {"requestId": upstream_id, "reason": "cancelled by the client"}
        try:
            await gen.writer.send(jsonrpc.notification("notifications/cancelled", params))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass

    async def cancel(self, upstream_id: int, reason: str) -> None:
        gen = self._gen
        if gen is not None and gen.pending.pop(upstream_id, None) is not None:
            self._abandoned.add(upstream_id)
            params = {"requestId": upstream_id, "reason": reason}
            await gen.writer.send(jsonrpc.notification("notifications/cancelled", params))

    async def notify(self, method: str, params: Any = None) -> None:
        gen = self._gen
        if gen is None or gen.dead:
            raise self._down_error()
        try:
            await gen.writer.send(jsonrpc.notification(method, params))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise self._down_error() from None

    async def send_reply(self, frame: Frame) -> None:
        """Answer a server-to-client request of the current process (its id unchanged)."""
        gen = self._gen
        if gen is None or gen.dead:
            return
        try:
            await gen.writer.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            log.warning("upstream went away before a reply reached it", extra={"upstream": self.name})

    def _down_error(self) -> UpstreamDown:
        if self._last_down is not None:
            retry_in = max(0.0, self._next_start - time.monotonic())
            last = self._last_down
            return UpstreamDown(self.name, last.reason, last.stderr_tail, retry_in)
        return UpstreamDown(self.name, "not started", [])

    # -- the read loop ---------------------------------------------------------------------------

    async def _read_loop(self, gen: _Generation) -> None:
        reader = FrameReader(gen.child, self.max_line_bytes)
        try:
            async for event in reader:
                if isinstance(event, BadLine):
                    self._bad_line(gen, event)
                    continue
                for frame in event.frames:
                    await self._dispatch(gen, frame)
        finally:
            with anyio.CancelScope(shield=True):
                await self._died(gen)

    def _bad_line(self, gen: _Generation, event: BadLine) -> None:
        ident = event.error.request_id
        pending = gen.pending.pop(ident, None) if isinstance(ident, int) else None
        if pending is not None:
            pending.failure = jsonrpc.MessageError(
                jsonrpc.INTERNAL_ERROR, f"upstream {self.name!r} sent an unusable reply: {event.error}"
            )
            pending.done.set()
        log.warning(
            "upstream wrote a line that is not JSON-RPC; dropped",
            extra={"upstream": self.name, "bytes": event.size, "reason": str(event.error)[:200]},
        )

    async def _dispatch(self, gen: _Generation, frame: Frame) -> None:
        if jsonrpc.is_reply(frame):
            ident = jsonrpc.id_of(frame)
            pending = gen.pending.pop(ident, None) if isinstance(ident, int) else None
            if pending is None:
                if isinstance(ident, int) and ident in self._abandoned:
                    self._abandoned.discard(ident)
                    return
                log.warning(
                    "upstream answered a request nobody sent; dropped",
                    extra={"upstream": self.name, "id": str(ident)[:40]},
                )
                return
            pending.reply = frame
            pending.done.set()
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

    async def _died(self, gen: _Generation) -> None:
        if gen.dead:
            return
        gen.dead = True
        await gen.writer.close()
        with anyio.move_on_after(1.0):
            await gen.child.wait()
        if gen.child.returncode is None:
            gen.child.kill()
            with anyio.move_on_after(1.0):
                await gen.child.wait()
        # Let the stderr pump take in the child's last words before they are quoted.
        await anyio.sleep(0.05)
        uptime = time.monotonic() - gen.started_at
        self._failures = 0 if uptime >= HEALTHY_AFTER else self._failures + 1
        backoff = min(BACKOFF_FIRST * 2 ** max(self._failures - 1, 0), BACKOFF_MAX)
        self._next_start = time.monotonic() + (backoff if self._failures else 0.0)
        down = UpstreamDown(self.name, gen.child.exit_reason(), list(gen.child.stderr_tail))
        self._last_down = down
        if gen.pending:
            log.warning(
                "upstream died with requests in flight",
                extra={"upstream": self.name, "reason": down.reason, "in_flight": len(gen.pending)},
            )
        elif gen.child.returncode not in (0, None, -15):
            log.warning("upstream died", extra={"upstream": self.name, "reason": down.reason})
        for pending in gen.pending.values():
            pending.failure = down
            pending.done.set()
        gen.pending.clear()


def _discovered(reply: Frame | None) -> dict[str, Any] | None:
    """The DiscoverResult in a reply, if it is one that names the modern version."""
    if reply is None or "result" not in reply:
        return None
    body = jsonrpc.decode_any(reply["result"])
    if not isinstance(body, dict) or not isinstance(body.get("supportedVersions"), list):
        return None
    return body if eras.LATEST_MODERN in body["supportedVersions"] else None
