"""The HTTP benchmark's columns: a server process listening on 127.0.0.1, and the era a client speaks.

Every column serves the same upstream (`examples/servers/notes_server.py`), in its own process:

    direct       the SDK serves the notes server over Streamable HTTP itself (`--http`)
    frugal       frugal-proxy `--http` in front of the notes server over stdio
    mcp-proxy    mcp-proxy (PyPI, in .bench-venv/mcp-proxy: it pins `mcp<2`) exposing the notes
                 server over stdio as Streamable HTTP; it speaks no 2026-07-28

A server is spawned in its own process group on a free loopback port, waited for until it
accepts a connection, and on exit sent SIGTERM (its group SIGKILL after 5 s), so no proxy or
upstream outlives the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import msgspec

from columns import ROOT, VENV_PYTHON, Upstream
from http_client import Era
from rpc_client import ConnectionFailed, child_log, file_tail, monotonic, signal_group

MCP_PROXY_VENV = ROOT / ".bench-venv" / "mcp-proxy"
MCP_PROXY = MCP_PROXY_VENV / "bin" / "mcp-proxy"
NOTES_SERVER = ROOT / "examples" / "servers" / "notes_server.py"
# The bench is a load test from one loopback client: frugal-proxy's per-client-IP rate limit
# (default 100/s, burst 1,000) would measure the limiter, so it is lifted.
FRUGAL_RATE_LIMIT = "1000000/1000000"
_READY_TIMEOUT = 30.0


class HttpColumn(msgspec.Struct, frozen=True):
    """One server and the era its client speaks; `base` is the direct column of the same era."""

    key: str
    label: str
    kind: str  # direct | frugal | mcp-proxy
    era: Era
    base: str
    argv: list[str]  # "{port}" stands for the port
    version: str | None = None
    unavailable: str | None = None

    def command(self, port: int) -> list[str]:
        """The server's command line for `port`."""
        return [arg.replace("{port}", str(port)) for arg in self.argv]


def http_columns(upstream: Upstream, frugal_args: Sequence[str], mcp_proxy_version: str | None) -> list[HttpColumn]:
    """direct and frugal-proxy in both eras, mcp-proxy with and without sessions."""
    address = "127.0.0.1:{port}"
    direct = [str(VENV_PYTHON), str(NOTES_SERVER), "--http", address]
    frugal = [
        str(VENV_PYTHON),
        *("-m", "frugal_proxy", "--http", address, "--rate-limit", FRUGAL_RATE_LIMIT),
        *frugal_args,
        "--",
        *upstream.command,
    ]
    mcp_proxy = [str(MCP_PROXY), "--host", "127.0.0.1", "--port", "{port}", "--log-level", "WARNING"]
    venv_missing = None if VENV_PYTHON.exists() else f"{VENV_PYTHON} is missing; run `bash scripts/setup.sh`"
    proxy_missing = venv_missing or (
        None if mcp_proxy_version else f"{MCP_PROXY} does not run; run `bash bench/setup.sh`"
    )
    return [
        HttpColumn(
            "direct-modern", "direct 2026-07-28", "direct", "modern", "direct-modern", direct, None, venv_missing
        ),
        HttpColumn(
            "direct-session", "direct session", "direct", "session", "direct-session", direct, None, venv_missing
        ),
        HttpColumn(
            "frugal-modern", "frugal 2026-07-28", "frugal", "modern", "direct-modern", frugal, None, venv_missing
        ),
        HttpColumn(
            "frugal-session", "frugal session", "frugal", "session", "direct-session", frugal, None, venv_missing
        ),
        HttpColumn(
            "mcp-proxy-stateless",
            "mcp-proxy --stateless",
            "mcp-proxy",
            "sessionless",
            "direct-session",
            [*mcp_proxy, "--stateless", "--", *upstream.command],
            mcp_proxy_version,
            proxy_missing,
        ),
        HttpColumn(
            "mcp-proxy-session",
            "mcp-proxy session",
            "mcp-proxy",
            "session",
            "direct-session",
            [*mcp_proxy, "--", *upstream.command],
            mcp_proxy_version,
            proxy_missing,
        ),
    ]


async def probe_mcp_proxy() -> str | None:
    """mcp-proxy's version when .bench-venv/mcp-proxy can run it, else None."""
    if not MCP_PROXY.exists():
        return None
    try:
        with anyio.fail_after(60):
            done = await anyio.run_process([str(MCP_PROXY), "--version"], check=False)
    except (OSError, TimeoutError):
        return None
    return done.stdout.decode().strip().split()[-1] if done.returncode == 0 and done.stdout.strip() else None


def free_port() -> int:
    """A port nobody listens on at 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """A spawned server process: its pid, port and log."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, log_path: Path) -> None:
        self.process = process
        self.port = port
        self.log_path = log_path

    @property
    def pid(self) -> int:
        """The server process (the proxy, not its upstream)."""
        return self.process.pid

    def log_tail(self) -> str:
        """The end of what the server wrote to stdout and stderr."""
        return file_tail(self.log_path)

    async def wait_listening(self) -> None:
        """Until the port accepts a connection; `ConnectionFailed` if the process exits or 30 s pass."""
        deadline = monotonic() + _READY_TIMEOUT
        while monotonic() < deadline:
            if self.process.returncode is not None:
                raise ConnectionFailed(f"exited with status {self.process.returncode}; log: {self.log_tail()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return
        raise ConnectionFailed(f"not listening on port {self.port} after {_READY_TIMEOUT:g} s; log: {self.log_tail()}")

    async def stop(self) -> None:
        """SIGTERM (a graceful drain), then SIGKILL to the whole group after 5 s."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(5):
                await self.process.wait()
        signal_group(self.process.pid, signal.SIGKILL)  # also an upstream left in the group
        with anyio.move_on_after(2):
            await self.process.wait()


@contextlib.asynccontextmanager
async def serve(column: HttpColumn) -> AsyncIterator[Server]:
    """Spawn the column's server on a free port and yield it once it listens; stop it on exit."""
    port = free_port()
    command = column.command(port)
    async with child_log("bench-http-") as (log_file, log_path):
        try:
            process = await asyncio.create_subprocess_exec(
                *command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, cwd=ROOT, start_new_session=True
            )
        except OSError as exc:
            raise ConnectionFailed(f"cannot spawn {command[0]}: {exc}") from exc
        finally:
            log_file.close()
        server = Server(process, port, log_path)
        try:
            await server.wait_listening()
            yield server
        finally:
            with anyio.CancelScope(shield=True):
                await server.stop()
