"""An upstream MCP server run as a child process over stdio.

The child inherits our environment plus the extra variables it was given. Its stdout carries
frames, on a pipe this process makes and reads itself (transports.stdio's FdSource: one reusable
buffer, no stream object and no protocol callback between the read and the reader); its stderr
is copied line by line to ours, prefixed with the upstream's name, and the last lines are kept
so that an error can say why the child died. Shutdown follows the stdio transport's advice:
close its stdin, then SIGTERM after a grace period, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence

import anyio
import anyio.to_thread

from frugal_proxy.transports.coalesce import Coalescer
from frugal_proxy.transports.lines import READ_CHUNK
from frugal_proxy.transports.stdio import FdSource

log = logging.getLogger("frugal_proxy.upstream")

STDERR_TAIL_LINES = 20
OFFER_LIMIT = 256 * 1024  # `offer` takes bytes at once while less than this waits to go to the child


def _write_stderr(data: bytes) -> None:
    sys.stderr.buffer.write(data)
    sys.stderr.buffer.flush()


class ChildStartError(OSError):
    """The command could not be started at all (not found, not executable)."""


# What to do about each way a command cannot start, appended to its reason.
_START_HINTS: dict[type[OSError], str] = {
    FileNotFoundError: " (check the program's spelling, that it is installed and that it is on PATH)",
    PermissionError: " (it is not executable: chmod +x it, or run it through its interpreter)",
    NotADirectoryError: " (a part of its path is a file, not a folder)",
}


class ChildProcess:
    """One running upstream process."""

    takes_whole = True  # `offer` hands a line to the pipe's transport whole, or takes none of it

    def __init__(self, process: asyncio.subprocess.Process, name: str, stdout: int) -> None:
        self._process = process
        self.name = name
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        assert process.stdin is not None
        self._stdout = FdSource(stdout)  # the read end of the child's stdout; closed at its end
        self._stdin = process.stdin
        self._transport = process.stdin.transport  # the pipe's, for the stream's life (read per message)
        self._closed = False
        self._stdout_closed = False
        # Messages offered in one loop turn after the first are held and go out in one write
        # when the turn ends (transports.coalesce): one system call and one wake-up of the child.
        self._coalescer = Coalescer(self._send_held)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @classmethod
    async def spawn(
        cls, command: Sequence[str], name: str, env: Mapping[str, str], cwd: str | None = None
    ) -> ChildProcess:
        full_env = {**os.environ, **env}
        stdout, child_stdout = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.PIPE,
                stdout=child_stdout,
                stderr=subprocess.PIPE,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            os.close(stdout)
            hint = _START_HINTS.get(type(exc), "")
            raise ChildStartError(exc.errno or 0, f"cannot start {command[0]!r}: {exc.strerror}{hint}") from None
        except BaseException:
            os.close(stdout)
            raise
        finally:
            os.close(child_stdout)  # the child has its copy: ours would keep the pipe from ending
        return cls(process, name, stdout)

    async def read(self) -> bytes:
        """The next chunk of the child's stdout; b"" once it has closed it (then the pipe is closed)."""
        if self._stdout_closed:
            return b""
        try:
            chunk = await self._stdout.read()
        except OSError:
            chunk = b""
        if not chunk:
            self.close_stdout()
        return chunk

    def close_stdout(self) -> None:
        """Stop reading the child's stdout and close our end (once its reader is done with it)."""
        if not self._stdout_closed:
            self._stdout_closed = True
            self._stdout.close()

    def offer(self, data: bytes) -> int:
        """Hand bytes to the pipe's transport at once (or hold them to the end of the loop turn)
        unless too much already waits to go."""
        transport = self._transport
        coalescer = self._coalescer
        waiting = transport.get_write_buffer_size() + coalescer.held_bytes
        if self._closed or transport.is_closing() or waiting >= OFFER_LIMIT:
            return 0  # write() says why, or waits for the child to read
        if coalescer.corked:
            coalescer.hold(data)
            return len(data)
        transport.write(data)
        coalescer.cork()
        return len(data)

    def hold(self) -> None:
        """Hold what is offered until this loop turn ends, the first message too: more messages
        are known to follow in this turn (transports.coalesce)."""
        self._coalescer.hold_turn()

    def _send_held(self, data: bytes) -> bool:
        if self._transport.is_closing():
            return False
        self._transport.write(data)
        return True

    async def write(self, data: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self._coalescer.uncork()  # what is held goes first
        try:
            self._stdin.write(data)
            await self._stdin.drain()
        except (ConnectionResetError, BrokenPipeError, RuntimeError) as exc:
            raise anyio.BrokenResourceError from exc

    async def close(self) -> None:
        """Close the child's stdin (the polite way to ask an MCP server to exit)."""
        self._coalescer.uncork()
        self._closed = True
        try:
            self._stdin.close()
        except (RuntimeError, OSError):
            pass
        await anyio.lowlevel.checkpoint()

    async def pump_stderr(self) -> None:
        """Copy the child's stderr to ours, line by line, prefixed with its name."""
        stderr = self._process.stderr
        assert stderr is not None
        pending = b""
        prefix = f"[{self.name}] ".encode()
        while True:
            try:
                chunk = await stderr.read(READ_CHUNK)
            except OSError:
                break
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if lines:
                await self._copy_out(prefix, lines)
        if pending:
            await self._copy_out(prefix, [pending])

    async def _copy_out(self, prefix: bytes, lines: list[bytes]) -> None:
        for line in lines:
            self.stderr_tail.append(line.decode("utf-8", "replace")[:500])
        text = b"".join(prefix + line + b"\n" for line in lines)
        # Our stderr may be a pipe nobody drains quickly: write it off the event loop.
        await anyio.to_thread.run_sync(_write_stderr, text)

    async def wait(self) -> int:
        return await self._process.wait()

    async def terminate(self, grace: float = 2.0) -> int:
        """Close stdin, then SIGTERM, then SIGKILL; returns the exit status."""
        await self.close()
        with anyio.move_on_after(grace):
            return await self._process.wait()
        self._signal(signal.SIGTERM)
        with anyio.move_on_after(grace):
            return await self._process.wait()
        self._signal(signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await self._process.wait()
        return self._process.returncode if self._process.returncode is not None else -9

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self._process.returncode is not None:
            return
        try:
            os.killpg(self._process.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                self._process.send_signal(sig)
            except ProcessLookupError:
                pass

    def exit_reason(self) -> str:
        """'exited with status 3' / 'killed by SIGKILL', for error messages."""
        code = self._process.returncode
        if code is None:
            return "stopped answering"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"
