"""One upstream MCP server over stdio: its process, its request ids, its era.

`UpstreamConnection` owns the child process and everything tied to its lifetime (what every
transport shares, the id and progress-token mapping, the initialize replay and the routing of
unasked messages, is `UpstreamBase`'s):

- a caller that is cancelled sends `notifications/cancelled` for its upstream id, once the
  request has gone out (one cancelled while waiting for its turn to be written is not sent);
- era detection follows the spec: probe `server/discover`, and fall back to the session era on
  any error or on a short timeout (never on one particular error code); a process that serves
  one client alone is probed only once that client's era is known, and not at all for a
  session-era client whose `initialize` it accepts (a dual-era server answers either, and keeps
  the era of the first one);
- when the process dies every pending request fails at once with `UpstreamDown`, naming the exit
  status and the last lines of its stderr; the next request restarts it after a backoff
  (0.5 s doubling to 30 s, reset once a process has stayed up for a minute).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from frugal_proxy.errors import UpstreamDown
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.transports.child import ChildProcess, ChildStartError
from frugal_proxy.transports.lines import BadLine, FrameReader, FrameWriter
from frugal_proxy.upstream.base import (
    HEALTHY_AFTER,
    PROXY_CLIENT_INFO,
    CutHandler,
    NotificationHandler,
    Pending,
    ProgressHandler,
    RelatedHandler,
    ServerRequestHandler,
    UpstreamBase,
    discovered,
)

__all__ = ["PROXY_CLIENT_INFO", "ProgressHandler", "RelatedHandler", "UpstreamBase", "UpstreamConnection"]

log = logging.getLogger("frugal_proxy.upstream")


@dataclass(eq=False)
class _Generation:
    """One run of the upstream process and what lives and dies with it."""

    child: ChildProcess
    writer: FrameWriter
    started_at: float
    pending: dict[int, Pending] = field(default_factory=dict)
    dead: bool = False
    stopping: bool = False  # the proxy is stopping it (`shutdown`): its end is not a failure


class UpstreamConnection(UpstreamBase):
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
        super().__init__(
            name=name,
            probe_timeout=probe_timeout,
            on_server_request=on_server_request,
            on_notification=on_notification,
        )
        self.command = list(command)
        self.env = env or {}
        self.cwd = cwd
        self.max_line_bytes = max_line_bytes
        self._gen: _Generation | None = None

    # -- lifetime --------------------------------------------------------------------------------

    async def __aenter__(self) -> UpstreamConnection:
        await super().__aenter__()
        return self

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
        return self._down_state()

    @property
    def running(self) -> bool:
        return self._gen is not None and not self._gen.dead

    async def shutdown(self) -> None:
        """Stop the process: stdin closed, SIGTERM after a grace period, SIGKILL after another."""
        gen = self._gen
        if gen is None or gen.dead:
            return
        gen.stopping = True
        with anyio.CancelScope(shield=True):
            await gen.writer.close()
            await gen.child.terminate()

    async def _start(self) -> None:
        assert self._tg is not None
        try:
            child = await ChildProcess.spawn(self.command, self.name, self.env, self.cwd)
        except ChildStartError as exc:
            self._record_down(exc.strerror or str(exc), [])
            raise self._down_error() from None
        gen = _Generation(child=child, writer=FrameWriter(child), started_at=time.monotonic())
        self._gen = gen
        self.generation += 1
        log.info("upstream started", extra={"upstream": self.name, "pid": child.pid})
        self._tg.start_soon(child.pump_stderr)
        self._tg.start_soon(self._read_loop, gen)
        await self._negotiate()

    async def _discover(self) -> dict[str, Any] | None:
        return await self._probe_discover()

    async def _probe_discover(self) -> dict[str, Any] | None:
        """Ask `server/discover`; None means the session era (an error, or no answer in time).

        The probe is never withdrawn: a slow server (one still importing its modules, say) that
        answers after the timeout is recognised as modern then, even though the proxy has moved
        on; a dual-era server refuses `initialize` once it has answered a modern request.
        """
        params = self.discover_params()
        answered = anyio.Event()
        self._probe_settled = settled = anyio.Event()
        self._session_open = False
        outcome: list[dict[str, Any] | None] = []
        generation = self.generation

        died: list[UpstreamDown] = []

        async def probe() -> None:
            try:
                reply = await self.request("server/discover", params)
            except UpstreamDown as exc:
                died.append(exc)  # it exited before answering: that is no era, it is a failed start
                reply = None
            finally:
                settled.set()
            outcome.append(discovered(reply))
            answered.set()
            if outcome[0] is None or self.generation != generation or self.era != "legacy":
                return
            if self._session_open:
                log.warning(
                    "upstream answered server/discover after it had accepted initialize: it stays in "
                    "the session era (a slow start? raise --probe-timeout)",
                    extra={"upstream": self.name, "probe_timeout": self.probe_timeout},
                )
                return
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

    # -- requests --------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        on_progress: ProgressHandler | None = None,
        on_related: RelatedHandler | None = None,
        headers: Mapping[str, str] | None = None,
        on_cut: CutHandler | None = None,
        abandon_quietly: bool = False,
    ) -> Frame:
        """Send a request and wait for its reply frame (a result or an error).

        `on_progress` gets the request's progress notifications, `on_related` the notifications
        of the stream it opens (those tagged with its id as their subscription id); `on_cut` is
        never told (a pipe has no response streams to close). Raises
        UpstreamDown when the process is gone or dies first. Cancelling the caller sends
        `notifications/cancelled` upstream.
        """
        gen = self._gen
        if gen is None or gen.dead:
            raise self._down_error()
        upstream_id, params, pending = self._open(params, on_progress, on_related, method)
        gen.pending[upstream_id] = pending
        try:
            await gen.writer.send(jsonrpc.request(upstream_id, method, params), on_writing=pending.mark_sent)
            await pending.wait()
        except anyio.get_cancelled_exc_class():
            # A request still waiting for its turn to be written never reached the upstream:
            # there is nothing to cancel there (it would hear of an id it never saw).
            if gen.pending.pop(upstream_id, None) is not None and pending.sent:
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
            self._close(upstream_id, pending)
        if pending.failure is not None:
            raise pending.failure
        assert pending.reply is not None
        return pending.reply

    def start_request(
        self,
        method: str,
        params: Any,
        on_settled: Callable[[Pending], Coroutine[Any, Any, None]],
        *,
        on_progress: ProgressHandler | None = None,
    ) -> Pending | None:
        """Send a request now, when the pipe takes it whole at once, with no task waiting for
        its reply: the read loop awaits `on_settled` once the reply is in (the process dying
        settles it with UpstreamDown). None, with nothing sent, when it cannot go out at once."""
        gen = self._gen
        if gen is None or gen.dead:
            return None
        upstream_id, params, pending = self._open(params, on_progress, None, method)
        if not gen.writer.offer(jsonrpc.request_line(upstream_id, method, params), on_writing=pending.mark_sent):
            self._close(upstream_id, pending)
            return None
        pending.upstream_id = upstream_id
        pending.on_settled = on_settled  # `settle` undoes the registrations of `_open` first
        gen.pending[upstream_id] = pending
        return pending

    def hold_writes(self) -> None:
        gen = self._gen
        if gen is not None and not gen.dead:
            gen.writer.hold()

    async def withdraw(self, pending: Pending, reason: str) -> None:
        gen = self._gen
        upstream_id = pending.upstream_id
        if gen is None or upstream_id is None or gen.pending.get(upstream_id) is not pending:
            return  # settled already, or of a process that is gone
        del gen.pending[upstream_id]
        self._close(upstream_id, pending)
        if pending.sent:
            self._abandoned.add(upstream_id)
            params = {"requestId": upstream_id, "reason": reason}
            try:
                await gen.writer.send(jsonrpc.notification("notifications/cancelled", params))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass

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
        waiting = gen.pending.pop(upstream_id, None) if gen is not None else None
        if gen is not None and waiting is not None and waiting.sent:
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

    # -- the read loop ---------------------------------------------------------------------------

    async def _read_loop(self, gen: _Generation) -> None:
        reader = FrameReader(gen.child, self.max_line_bytes)
        try:
            async for event in reader:
                if reader.starts_burst and self.on_burst is not None:
                    self.on_burst()  # the replies to this read's messages go to the client together
                if isinstance(event, BadLine):
                    self._bad_line(gen, event)
                    continue
                messages = event.messages
                for index, frame in enumerate(event.frames):
                    await self._deliver(frame, gen.pending, messages[index] if messages is not None else None)
        finally:
            gen.child.close_stdout()
            with anyio.CancelScope(shield=True):
                await self._died(gen)

    def _bad_line(self, gen: _Generation, event: BadLine) -> None:
        self._unusable(gen.pending, event.error)
        log.warning(
            "upstream wrote a line that is not JSON-RPC; dropped",
            extra={"upstream": self.name, "bytes": event.size, "reason": str(event.error)[:200]},
        )

    async def _died(self, gen: _Generation) -> None:
        if gen.dead:
            return
        gen.dead = True
        await gen.writer.close()
        if gen.stopping:
            # `shutdown` is ending it politely (stdin closed, SIGTERM, SIGKILL, each after a
            # grace period): killing it here would cut that short and read as a crash.
            await gen.child.wait()
        else:
            with anyio.move_on_after(1.0):
                await gen.child.wait()
            if gen.child.returncode is None:
                gen.child.kill()
                with anyio.move_on_after(1.0):
                    await gen.child.wait()
        # Let the stderr pump take in the child's last words before they are quoted.
        await anyio.sleep(0.05)
        uptime = time.monotonic() - gen.started_at
        self._record_down(gen.child.exit_reason(), list(gen.child.stderr_tail), healthy=uptime >= HEALTHY_AFTER)
        down = self._last_down
        assert down is not None
        if gen.stopping:
            log.info("upstream stopped", extra={"upstream": self.name, "reason": down.reason})
        elif gen.pending:
            log.warning(
                "upstream died with requests in flight",
                extra={"upstream": self.name, "reason": down.reason, "in_flight": len(gen.pending)},
            )
        elif gen.child.returncode not in (0, None, -15):
            log.warning("upstream died", extra={"upstream": self.name, "reason": down.reason})
        settled = list(gen.pending.values())
        gen.pending.clear()
        for pending in settled:
            pending.failure = down
            pending.set_done()
        for pending in settled:
            if pending.on_settled is not None:
                await self.settle(pending)
