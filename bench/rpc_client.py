"""A raw JSON-RPC client over a child process's stdin/stdout, lean enough not to be the bottleneck.

Messages are newline-delimited JSON. Requests are written from pre-encoded parameter bytes and
replies are decoded only down to their envelope (the result stays `msgspec.Raw`), so decoding
costs the same whatever the payload size. Requests the server sends to the client (FastMCP's
proxy asks for `roots/list`) are answered at once so that no peer waits on us.

The pipes are driven by asyncio's subprocess protocol callbacks rather than anyio byte streams:
on a 2-core machine the client shares the CPU with the upstream and the proxy, and a stream
read, a write lock and a cancel scope per call cost it several times the CPU of a callback that
resolves a future (one watchdog timer enforces every reply deadline instead). It still runs
under `anyio.run` on the asyncio backend; cancellation reaches it through the awaiting task.

Errors, by what the caller can do:

    ClientError              the column's figure for this phase is lost; report it
    ├── ConnectionFailed     the child could not start, exited, or closed its stdout
    ├── RequestTimedOut      no reply within the deadline
    └── ErrorReply           the peer answered with a JSON-RPC error or a tool error

Importing it gives the bench a FRUGAL_HOME of its own (`isolated_home`), unless the caller set one:
the proxies it starts run with the usage ledger on, as users run them, but their lines (a bench
makes hundreds of thousands) never reach the real home's ledger and `stats`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Any

import anyio
import msgspec

PROTOCOL_VERSION = "2025-11-25"
_STDERR_TAIL = 1200
_WATCHDOG_PERIOD = 0.25


def isolated_home() -> str:
    """FRUGAL_HOME for this process and the proxies it starts: a temporary folder, removed at
    exit, unless FRUGAL_HOME is set already."""
    if "FRUGAL_HOME" not in os.environ:
        folder = tempfile.mkdtemp(prefix="frugal-bench-home-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["FRUGAL_HOME"] = folder
    return os.environ["FRUGAL_HOME"]


isolated_home()


class ClientError(Exception):
    """A request or the connection failed; the message says which and how."""


class ConnectionFailed(ClientError):
    """The child could not be spawned, exited early, or closed its stdout."""


class RequestTimedOut(ClientError):
    """No reply arrived within the deadline."""


class ErrorReply(ClientError):
    """The peer answered with a JSON-RPC error, or a tool result flagged `isError`."""


class Message(msgspec.Struct):
    """One JSON-RPC message, decoded only down to its envelope."""

    id: int | str | None = None
    method: str | None = None
    # An empty Raw means the member was absent (msgspec cannot decode `Raw | None`).
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


class _TextBlock(msgspec.Struct):
    type: str
    text: str | None = None


class _ToolText(msgspec.Struct):
    content: list[_TextBlock] = []


decode_message = msgspec.json.Decoder(Message).decode
_IS_ERROR_TRUE = re.compile(rb'"isError"\s*:\s*true')
_decode_text = msgspec.json.Decoder(_ToolText).decode
_encode = msgspec.json.encode


class RawClient:
    """A JSON-RPC connection to one spawned child; build it with `connect`."""

    def __init__(self, stderr_path: Path, reply_timeout: float) -> None:
        self.reply_timeout = reply_timeout
        self._loop = asyncio.get_running_loop()
        self._stderr_path = stderr_path
        self._process: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._pending: dict[int, tuple[asyncio.Future[Message], float]] = {}
        self._next_id = 0
        self._partial = bytearray()
        self._exited = asyncio.Event()
        self._closed_reason: str | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self._process is not None
        return self._process.get_pid()

    def stderr_tail(self) -> str:
        """The last lines the child wrote to stderr, for error reports."""
        return file_tail(self._stderr_path)

    async def request(self, method: str, params: bytes = b"{}") -> Message:
        """Send one request with pre-encoded `params` and wait up to `reply_timeout` for its reply."""
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Message] = self._loop.create_future()
        self._pending[request_id] = (future, time.perf_counter())
        try:
            self._write(
                b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}\n' % (request_id, method.encode(), params)
            )
            reply = await future
        finally:
            self._pending.pop(request_id, None)
        if reply.error:
            raise ErrorReply(f"{method}: {bytes(reply.error)[:300].decode('utf-8', 'replace')}")
        return reply

    async def notify(self, method: str, params: bytes = b"{}") -> None:
        """Send one notification."""
        self._write(b'{"jsonrpc":"2.0","method":"%s","params":%s}\n' % (method.encode(), params))

    async def call_tool(self, params: bytes) -> Message:
        """`tools/call` with pre-encoded params; a result flagged `isError` raises `ErrorReply`."""
        return tool_result(await self.request("tools/call", params))

    async def handshake(self) -> None:
        """The legacy handshake: `initialize`, then `notifications/initialized`."""
        params = _encode(
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"roots": {"listChanged": False}},
                "clientInfo": {"name": "frugal-bench", "version": "0"},
            }
        )
        await self.request("initialize", params)
        await self.notify("notifications/initialized")

    def _attach(self, process: asyncio.SubprocessTransport) -> None:
        self._process = process
        stdin = process.get_pipe_transport(0)
        assert isinstance(stdin, asyncio.WriteTransport)
        self._stdin = stdin
        self._watchdog = self._loop.call_later(_WATCHDOG_PERIOD, self._check_deadlines)

    def _write(self, line: bytes) -> None:
        if self._closed_reason is not None:
            raise ConnectionFailed(self._with_stderr(self._closed_reason))
        assert self._stdin is not None
        self._stdin.write(line)

    def _feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._partial:
                self._partial += chunk[start:end]
                line = bytes(self._partial)
                self._partial.clear()
            else:
                line = chunk[start:end]
            self._dispatch(line)
            start = end + 1
        self._partial += chunk[start:]

    def _dispatch(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = decode_message(line)
        except msgspec.DecodeError:
            return
        if message.method is not None:
            if message.id is not None and self._closed_reason is None:
                self._answer(message)
            return
        if isinstance(message.id, int) and (entry := self._pending.get(message.id)) is not None:
            if not entry[0].done():
                entry[0].set_result(message)

    def _answer(self, message: Message) -> None:
        if message.method == "roots/list":
            body: dict[str, Any] = {"result": {"roots": []}}
        elif message.method == "ping":
            body = {"result": {}}
        else:
            body = {"error": {"code": -32601, "message": f"bench client has no {message.method}"}}
        self._write(_encode({"jsonrpc": "2.0", "id": message.id, **body}) + b"\n")

    def _check_deadlines(self) -> None:
        oldest_allowed = time.perf_counter() - self.reply_timeout
        for future, sent in list(self._pending.values()):
            if sent < oldest_allowed and not future.done():
                future.set_exception(RequestTimedOut(f"no reply within {self.reply_timeout:g} s"))
        if self._closed_reason is None:
            self._watchdog = self._loop.call_later(_WATCHDOG_PERIOD, self._check_deadlines)

    def _close(self, reason: str) -> None:
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        if self._watchdog is not None:
            self._watchdog.cancel()
        failure = ConnectionFailed(self._with_stderr(reason))
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(failure)

    def _on_exit(self) -> None:
        self._exited.set()
        code = self._process.get_returncode() if self._process is not None else None
        # Replies still in the pipe are delivered before stdout closes; give them a moment.
        self._loop.call_later(0.5, self._close, f"the child exited with status {code}")

    def _with_stderr(self, reason: str) -> str:
        tail = self.stderr_tail()
        return f"{reason}; stderr: {tail}" if tail else reason

    async def _stop(self) -> None:
        """Close stdin, give the child a moment to exit, then end its whole process group."""
        process = self._process
        if process is None:
            return
        if self._stdin is not None:
            self._stdin.close()
        with anyio.move_on_after(3):
            await self._exited.wait()
        if not self._exited.is_set():
            signal_group(process.get_pid(), signal.SIGTERM)
            with anyio.move_on_after(2):
                await self._exited.wait()
        # Also reaches an upstream the proxy left behind in the child's group.
        signal_group(process.get_pid(), signal.SIGKILL)
        with anyio.move_on_after(2):
            await self._exited.wait()
        self._close("the connection was closed")
        process.close()


class _Pipes(asyncio.SubprocessProtocol):
    def __init__(self, client: RawClient) -> None:
        self._client = client

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._client._feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._client._close("the child closed its stdout")
        elif fd == 0:
            self._client._close("the child closed its stdin")

    def process_exited(self) -> None:
        self._client._on_exit()


def tool_result(reply: Message) -> Message:
    """The reply to a `tools/call`, unless its result is flagged `isError` (then `ErrorReply`)."""
    # A quote inside a JSON string is escaped, so this cannot match inside the result's text.
    if reply.result and _IS_ERROR_TRUE.search(reply.result):
        raise ErrorReply(f"tool error: {bytes(reply.result)[:300].decode('utf-8', 'replace')}")
    return reply


def result_text_bytes(reply: Message) -> int:
    """The UTF-8 size of all text blocks in a tool result."""
    if not reply.result:
        return 0
    result = _decode_text(reply.result)
    return sum(len(block.text.encode()) for block in result.content if block.text is not None)


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to the process group `pid` leads, if it is still there."""
    # The child leads its own session, so its group holds it and any upstream it spawned.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@contextlib.asynccontextmanager
async def connect(
    command: Sequence[str], cwd: Path | None = None, reply_timeout: float = 60.0
) -> AsyncIterator[RawClient]:
    """Spawn `command` in its own process group and yield a client on its stdio; stop it on exit.

    Every request on the client fails with `RequestTimedOut` after `reply_timeout` seconds.
    """
    async with child_log("bench-stderr-") as (stderr_file, stderr_path):
        client = RawClient(stderr_path, reply_timeout)
        try:
            process, _ = await asyncio.get_running_loop().subprocess_exec(
                lambda: _Pipes(client),
                *command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr_file,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ConnectionFailed(f"cannot spawn {command[0]}: {exc}") from exc
        finally:
            stderr_file.close()
        client._attach(process)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client._stop()


@contextlib.asynccontextmanager
async def child_log(prefix: str) -> AsyncIterator[tuple[IO[bytes], Path]]:
    """A temporary file (open for writing, and its path) for a child's output; removed on exit."""
    handle: IO[bytes] = tempfile.NamedTemporaryFile(prefix=prefix, delete=False)
    path = Path(handle.name)
    try:
        yield handle, path
    finally:
        handle.close()
        with anyio.CancelScope(shield=True):
            await anyio.Path(path).unlink(missing_ok=True)


def file_tail(path: Path) -> str:
    """The end of a child's log, for error reports; empty when it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-_STDERR_TAIL:].decode("utf-8", "replace").strip()


def monotonic() -> float:
    """The clock every figure is taken with."""
    return time.perf_counter()
