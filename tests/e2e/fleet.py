"""A fleet on one machine, for end-to-end tests: `frugal-proxy serve --http` replicas on
127.0.0.1, each with its own --replica-id, sharing one FRUGAL_HOME (so one usage folder, as a
volume the replicas of a real fleet share), and HAProxy from Debian in front of them, run with
examples/fleet/haproxy.cfg itself (its addresses come from the environment). Given a
redis-server (tests/redis_server.py's `redis_server` fixture), the replicas keep their books
there: `[state] backend = "redis"` is added to a copy of their config.

    with running_fleet(tmp_path, config, redis=redis_server) as fleet:
        fleet.front                     the MCP URL HAProxy serves
        fleet.replicas[i]               .id, .url (direct), .proxy (the process, its stderr)
        fleet.lines(replica)            the lines of that replica's ledger file, this month
        fleet.wait_lines(counts)        until the ledgers hold that many lines each (written
                                        0.2 s after the call at most)
        fleet.kill(replica)             kill -9, then wait until HAProxy has taken it out
        fleet.haproxy.states()          each server's state in HAProxy (UP, DOWN, …)
        fleet.redis                     the replicas' redis-server, or None (memory backend)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from frugal_proxy.ledger import reader
from frugal_proxy.state.usage import utc_month
from tests.conftest import ROOT, notes_command, reserved_port
from tests.e2e.test_http_downstream import Proxy
from tests.pace import paced
from tests.redis_server import RedisServer

HAPROXY_CFG = ROOT / "examples" / "fleet" / "haproxy.cfg"
REPLICA_IDS = ("replica-1", "replica-2", "replica-3")  # the servers haproxy.cfg names
PRICE = "0.003"  # each call of the notes upstream's tools, so that the ledgers hold money
WAIT = 30.0  # seconds any wait here takes at most on an idle machine (each wait scales it by the pace)
POLL = 0.05


def priced_notes_config(tmp_path: Path) -> Path:
    """A serve config: the notes server as the one upstream, every call $0.003."""
    path = tmp_path / "frugal.toml"
    path.write_text(f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\ncost_per_call = {PRICE}\n")
    return path


def on_redis(config: Path, server: RedisServer) -> Path:
    """A copy of `config` (beside it) whose replicas keep their state on `server`. The command
    timeouts are long: a loaded machine's slow answer must not read as Redis being down."""
    path = config.with_name(f"{config.stem}.redis{config.suffix}")
    state = f'\n[state]\nbackend = "redis"\nurl = "{server.url}"\ntimeout = "5s"\nconnect_timeout = "5s"\n'
    path.write_text(config.read_text() + state)
    return path


def serve_argv(config: Path, replica: str, *options: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "frugal_proxy",
        "serve",
        "--config",
        str(config),
        "--http",
        "127.0.0.1:0",
        "--replica-id",
        replica,
        *options,
    ]


@dataclass
class Replica:
    id: str
    proxy: Proxy

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def address(self) -> str:
        """HOST:PORT, as haproxy.cfg takes it."""
        return self.url.split("//", 1)[1].split("/", 1)[0]


def start_replica(config: Path, home: Path, replica: str, *options: str) -> Replica:
    proxy = Proxy(serve_argv(config, replica, *options), {"FRUGAL_HOME": str(home)})
    proxy.wait_listening()
    return Replica(replica, proxy)


def until(condition: Any, what: str, timeout: float = WAIT) -> None:
    """Wait for `condition()` to hold (it polls a file or a socket: the event has no other
    signal); fail saying `what` did not happen within `timeout` seconds (paced: tests/pace.py)."""
    timeout = paced(timeout)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s")
        time.sleep(POLL)


class HaProxy:
    """HAProxy in the foreground with haproxy.cfg, its admin socket in a temp folder."""

    def __init__(self, folder: Path, replicas: list[Replica]) -> None:
        binary = shutil.which("haproxy")
        if binary is None:
            pytest.fail("haproxy is not installed: scripts/setup.sh installs Debian's")
        self.socket = folder / "haproxy.sock"
        with reserved_port() as port:
            env = {
                "FRUGAL_FRONT": f"127.0.0.1:{port}",
                "FRUGAL_HAPROXY_SOCKET": str(self.socket),
                **{f"FRUGAL_REPLICA_{n}": replica.address for n, replica in enumerate(replicas, 1)},
            }
            # The Proxy helper runs any process with its stderr collected and shown on failure.
            self.balancer = Proxy([binary, "-db", "-f", str(HAPROXY_CFG)], env)
            process = self.balancer.process
            until(lambda: process.poll() is not None or self.socket.exists(), "HAProxy did not start")
            if process.poll() is not None:
                self.balancer.stop()
                pytest.fail("HAProxy exited:\n" + "\n".join(self.balancer.lines))
        self.front = f"http://127.0.0.1:{port}/mcp"

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self) -> dict[str, str]:
        """Each replica server's status as HAProxy sees it: `UP`, `DOWN`, `UP 1/2` …"""
        rows = self.command("show stat").splitlines()
        header = rows[0].lstrip("# ").split(",")
        name, status = header.index("svname"), header.index("status")
        found = {}
        for row in rows[1:]:
            cells = row.split(",")
            if len(cells) > status and cells[0] == "replicas" and cells[name] not in ("BACKEND", "FRONTEND"):
                found[cells[name]] = cells[status]
        return found

    def stop(self) -> None:
        self.balancer.stop()


@dataclass
class Fleet:
    home: Path
    replicas: list[Replica]
    haproxy: HaProxy
    config: Path  # what the replicas run with (on Redis: the copy that says so)
    redis: RedisServer | None = None

    @property
    def front(self) -> str:
        return self.haproxy.front

    @property
    def usage(self) -> Path:
        return self.home / "usage"

    def lines(self, replica: Replica) -> list[dict[str, Any]]:
        """What `replica` wrote to its own ledger file this month (a line being written skipped)."""
        path = reader.month_path(utc_month(time.time()), self.usage, replica.id)
        return [line for line in reader.lines(path, dict)] if path.exists() else []

    def counts(self) -> dict[str, int]:
        return {replica.id: len(self.lines(replica)) for replica in self.replicas}

    def wait_lines(self, total: int) -> dict[str, int]:
        """The replicas' line counts once they add up to `total` (their writers flush every 0.2 s)."""
        until(lambda: sum(self.counts().values()) >= total, f"the ledgers did not reach {total} lines")
        return self.counts()

    def wait_all_up(self) -> None:
        until(
            lambda: list(self.haproxy.states().values()) == ["UP"] * len(self.replicas),
            "HAProxy did not see every replica's /healthz pass",
        )

    def kill(self, replica: Replica) -> None:
        """kill -9: no drain, no flush; then wait until HAProxy's health check has taken it out."""
        replica.proxy.process.send_signal(signal.SIGKILL)
        replica.proxy.process.wait(paced(10))
        until(lambda: self.haproxy.states().get(replica.id) == "DOWN", f"HAProxy did not take {replica.id} out")


@contextlib.contextmanager
def running_fleet(tmp_path: Path, config: Path, *options: str, redis: RedisServer | None = None) -> Iterator[Fleet]:
    """Three replicas (`serve --http` with `options`, e.g. --stateless) and HAProxy in front,
    every replica up in HAProxy's eyes; everything stopped afterwards, by pid. With `redis`,
    the replicas share their state on it (the test's fixture starts and stops the server)."""
    home = tmp_path / "fleet-home"
    if redis is not None:
        config = on_redis(config, redis)
    replicas: list[Replica] = []
    haproxy: HaProxy | None = None
    try:
        for replica in REPLICA_IDS:
            replicas.append(start_replica(config, home, replica, *options))
        haproxy = HaProxy(tmp_path, replicas)
        fleet = Fleet(home, replicas, haproxy, config, redis)
        fleet.wait_all_up()
        yield fleet
    finally:
        if haproxy is not None:
            haproxy.stop()
        for replica in replicas:
            replica.proxy.stop()
