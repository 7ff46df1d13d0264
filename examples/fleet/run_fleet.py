"""The compose example as plain processes on one machine (docs/fleet.md).

    python examples/fleet/run_fleet.py [--config frugal.toml] [--port 8765] [--home DIR]

Starts redis-server on a free loopback port when it is installed, three `frugal-proxy serve
--http --stateless` replicas on loopback ports (`replica-1` … `replica-3`, one FRUGAL_HOME, so one
usage folder for their ledgers) and HAProxy with examples/fleet/haproxy.cfg in front. With
redis-server, the replicas keep their state there (`[state] backend = "redis"`, FRUGAL_REDIS_URL):
one daily cap, one cooldown, one loop guard and one cache for the three. They run on a copy of
their config (--config, else $FRUGAL_CONFIG, else FRUGAL_HOME's, else an empty one) with that
`[state]` table added; a config that has its own `[state]` is used as it is. Without
redis-server, each replica keeps its own books. It prints the front URL and stops everything it
started, by pid, on Ctrl-C or SIGTERM (or when one of them exits); the temporary folder
(redis's, HAProxy's socket, the replicas' config, the default FRUGAL_HOME with the ledgers) stays.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPLICAS = ("replica-1", "replica-2", "replica-3")
LISTENING = re.compile(r"frugal-proxy: listening on (http://\S+)")
START_SECONDS = 60.0


def free_port() -> int:
    """A port free a moment ago (a script on one machine: good enough; the tests reserve theirs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accepting(port: int, seconds: float) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port` within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


class Fleet:
    def __init__(self) -> None:
        self.processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stopping = threading.Event()

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        self.processes.append((name, process))
        return process

    def stop(self) -> None:
        """SIGTERM to each process started (HAProxy first), then SIGKILL to any still running after 10 s."""
        self.stopping.set()
        for _, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _, process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def on_redis(config: Path | None, work: Path) -> Path:
    """The replicas' config: `config` (None: none) with `[state] backend = "redis"` added,
    written into `work`; `config` itself when it has a `[state]` table of its own."""
    text = config.read_text() if config is not None and config.exists() else ""
    if "state" in tomllib.loads(text):
        assert config is not None
        return config
    shared = work / "frugal.toml"
    # The URL comes from FRUGAL_REDIS_URL, which main() sets.
    shared.write_text(f'{text}\n[state]\nbackend = "redis"\n')
    return shared


def default_config(explicit: str | None, env: dict[str, str]) -> Path | None:
    """The config `serve` would read: --config, else $FRUGAL_CONFIG, else FRUGAL_HOME's."""
    if explicit:
        return Path(explicit)
    if env.get("FRUGAL_CONFIG"):
        return Path(env["FRUGAL_CONFIG"])
    found = Path(env["FRUGAL_HOME"]) / "config" / "frugal.toml"
    return found if found.exists() else None


def relay(name: str, process: subprocess.Popen[bytes], found: list[str], ready: threading.Event) -> None:
    """Copy a process's stderr to ours, tagged with its name; note the URL a replica says it listens on."""
    assert process.stderr is not None
    for raw in process.stderr:
        line = raw.decode(errors="replace").rstrip("\n")
        match = LISTENING.fullmatch(line)
        if match and not found:
            found.append(match.group(1))
            ready.set()
        print(f"[{name}] {line}", file=sys.stderr, flush=True)
    ready.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="the replicas' frugal.toml (default: serve's own default)")
    parser.add_argument("--port", type=int, default=8765, help="HAProxy's port on 127.0.0.1 (default: 8765)")
    parser.add_argument("--home", type=Path, help="the replicas' FRUGAL_HOME (default: a new temporary folder)")
    options = parser.parse_args(argv)
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        print("run_fleet: haproxy is not installed (Debian: apt-get install haproxy)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="frugal-fleet-"))
    home = options.home or work / "home"
    fleet = Fleet()

    def on_signal(signum: int, _frame: object) -> None:
        fleet.stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        env = {**os.environ, "FRUGAL_HOME": str(home)}
        config = default_config(options.config, env)
        redis = shutil.which("redis-server")
        if redis is not None:
            port = free_port()
            fleet.start(
                "redis", [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(work)], env
            )
            if not accepting(port, START_SECONDS):
                print("run_fleet: redis-server did not start", file=sys.stderr)
                return 1
            env["FRUGAL_REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
            config = on_redis(config, work)
            print(f"run_fleet: redis-server on 127.0.0.1:{port}, the replicas' [state] in {config}", file=sys.stderr)
        else:
            print("run_fleet: no redis-server here: the replicas keep their state in memory", file=sys.stderr)
        addresses = []
        for replica in REPLICAS:
            argv_ = [sys.executable, "-m", "frugal_proxy", "serve", "--http", "127.0.0.1:0", "--stateless"]
            argv_ += ["--replica-id", replica, *(["--config", str(config)] if config is not None else [])]
            process = fleet.start(replica, argv_, env)
            found: list[str] = []
            ready = threading.Event()
            threading.Thread(target=relay, args=(replica, process, found, ready), daemon=True).start()
            if not ready.wait(START_SECONDS) or not found:
                print(f"run_fleet: {replica} did not start (its stderr is above)", file=sys.stderr)
                return 1
            addresses.append(found[0].split("//", 1)[1].split("/", 1)[0])
        balancer_env = {
            **env,
            "FRUGAL_FRONT": f"127.0.0.1:{options.port}",
            "FRUGAL_HAPROXY_SOCKET": str(work / "haproxy.sock"),
            **{f"FRUGAL_REPLICA_{n}": address for n, address in enumerate(addresses, 1)},
        }
        balancer = fleet.start("haproxy", [haproxy, "-db", "-f", str(HERE / "haproxy.cfg")], balancer_env)
        threading.Thread(target=relay, args=("haproxy", balancer, [], threading.Event()), daemon=True).start()
        print(f"http://127.0.0.1:{options.port}/mcp", flush=True)
        print(f"run_fleet: usage ledgers in {home / 'usage'}; Ctrl-C stops everything", file=sys.stderr)
        while not fleet.stopping.wait(0.5):
            exited = [name for name, process in fleet.processes if process.poll() is not None]
            if exited:
                print(f"run_fleet: {', '.join(exited)} exited; stopping the rest", file=sys.stderr)
                return 1
        return 0
    finally:
        fleet.stop()  # the folder stays: the ledgers are in it


if __name__ == "__main__":
    sys.exit(main())
