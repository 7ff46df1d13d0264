"""The redis-server every Redis test starts for itself, and the replicas' connections to it.

backend, server   fixtures: a contract test runs once with "memory" (server None) and once
                  with "redis" (a redis_server)
redis_server      fixture: a fresh redis-server on a reserved loopback port, in a temp dir,
                  `--save "" --appendonly no`, stopped by pid at teardown; skips the test
                  where redis-server is not installed (scripts/setup.sh installs it)
RedisServer       stop / start again on the same port, pause (SIGSTOP) / resume, flush
replica(url)      an async context: one RedisLink with its watcher running, as one replica
                  of the proxy holds it (several in one test stand for several replicas)
until(link, p)    wait for a condition another replica brings about (a pub/sub event)
Wire              counts a link's round trips on the wire: `wire.counting(link)` makes its
                  connections redis-py Connections that note each write (one write is one round
                  trip: a pipeline is packed and sent at once), set-up and PINGs left out
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio.connection import Connection

from frugal_proxy.state.redis_link import RedisLink
from tests.pace import deadline, paced

READY = b"Ready to accept connections"


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    log: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start it (again) on its port and return once it accepts connections."""
        process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.directory),
                "--logfile", "",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.process = process
        assert process.stdout is not None
        for line in process.stdout:  # its log, until it says it is ready (or it ends)
            self.log.append(line)
            if READY in line:
                return
        raise RuntimeError("redis-server did not start:\n" + b"".join(self.log[-20:]).decode(errors="replace"))

    def stop(self) -> None:
        """Stop it by pid and wait for it to end."""
        process, self.process = self.process, None
        if process is None:
            return
        if self.paused:
            os.kill(process.pid, signal.SIGCONT)
            self.paused = False
        process.terminate()
        try:
            process.wait(timeout=paced(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=paced(10))
        if process.stdout is not None:
            process.stdout.close()

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """SIGSTOP for the block, SIGCONT after it, whatever happens inside."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def command(self, *args: str) -> str:
        """One command through redis-cli (a client apart from the proxy's): its reply."""
        done = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, timeout=paced(10), check=True
        )
        return done.stdout.decode().strip()

    def calls(self, *commands: str) -> int:
        """How many times the server ran these commands (INFO commandstats)."""
        total = 0
        for line in self.command("INFO", "commandstats").splitlines():
            name, _, rest = line.partition(":")
            if name.removeprefix("cmdstat_") in commands:
                total += int(rest.split(",")[0].removeprefix("calls="))
        return total


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs Debian's redis-server)")
    # Held bound (never listening) for the whole test, so that a restart gets the same port back.
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        server = RedisServer(holder.getsockname()[1], tmp_path)
        server.start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    """A contract test runs against the memory store and the Redis one alike."""
    return str(request.param)


@pytest.fixture
def server(backend: str, request: pytest.FixtureRequest) -> RedisServer | None:
    """The Redis test's server; None for the memory store."""
    return request.getfixturevalue("redis_server") if backend == "redis" else None


@asynccontextmanager
async def replica(url: str, prefix: str = "frugal:", command_timeout: float = 2.0) -> AsyncIterator[RedisLink]:
    """One replica's connection with its watcher running (stores made on it inside the block get
    every event from then on)."""
    # Timeouts long enough for a loaded machine (2 cores shared by many test runs): a test about
    # Redis not answering waits out one of them, bounded by its own deadline; both are paced.
    command_timeout = paced(command_timeout)
    link = RedisLink(url, prefix=prefix, timeout=command_timeout, connect_timeout=command_timeout)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(link.watch)
            yield link
            tg.cancel_scope.cancel()
    finally:
        await link.aclose()


async def until(link: RedisLink, predicate: Callable[[], bool], within: float = 20.0) -> None:
    """Return once `predicate()` holds, checked at each change the link sees (a pub/sub event
    applied, degraded, recovered); fail after `within` seconds."""
    with deadline(within):
        while not predicate():
            await link.changed()


NOT_A_CALLS = frozenset({b"PING", b"HELLO", b"CLIENT", b"SELECT", b"AUTH"})  # set-up, the watcher's pings


def command_names(packed: Any) -> list[bytes]:
    """The command names in one write (RESP arrays of bulk strings, as redis-py packs them)."""
    data = packed if isinstance(packed, bytes | bytearray | memoryview) else b"".join(bytes(p) for p in packed)
    found, rest = [], bytes(data)
    while rest.startswith(b"*"):
        count, rest = rest[1:].split(b"\r\n", 1)
        parts = []
        for _ in range(int(count)):
            size, rest = rest[1:].split(b"\r\n", 1)
            parts.append(rest[: int(size)])
            rest = rest[int(size) + 2 :]
        found.append(parts[0].upper())
    return found


class Wire:
    """What a link's connections wrote: one entry per round trip, its command names. Counted
    on the connections, so the count does not rely on the link code it checks."""

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []

    def counting(self, link: RedisLink) -> None:
        """From now on, the connections `link` opens note what they send (set it before any)."""
        wire = self

        class Counting(Connection):
            async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                sent = command_names(command)
                if sent and not set(sent) <= NOT_A_CALLS:
                    wire.writes.append(sent)
                await super().send_packed_command(command, check_health)

        link.client.connection_pool.connection_class = Counting
