"""examples/fleet/: the HAProxy config HAProxy accepts, the compose file's structure (there is no
Docker engine on the test machine: the file is parsed and checked, not run), and run_fleet.py
run for real: three replicas and HAProxy as plain processes, a call through the front URL it
prints, and everything it started gone after SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client

from frugal_proxy import config
from tests.conftest import ROOT, reserved_port, show_stderr_on_failure
from tests.e2e.fleet import HAPROXY_CFG, REPLICA_IDS
from tests.pace import deadline, paced

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

FLEET = ROOT / "examples" / "fleet"


def test_haproxy_accepts_the_config_and_names_the_replicas(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "FRUGAL_FRONT": "127.0.0.1:8765",
        "FRUGAL_HAPROXY_SOCKET": str(tmp_path / "haproxy.sock"),
        **{f"FRUGAL_REPLICA_{n}": f"127.0.0.1:{9000 + n}" for n in (1, 2, 3)},  # compose names do not resolve here
    }
    haproxy = shutil.which("haproxy")
    assert haproxy is not None, "haproxy is not installed: scripts/setup.sh installs Debian's"
    checked = subprocess.run([haproxy, "-c", "-f", str(HAPROXY_CFG)], env=env, capture_output=True, timeout=paced(30))
    assert checked.returncode == 0, checked.stderr
    text = HAPROXY_CFG.read_text()
    assert re.findall(r"^\s+server (\S+) ", text, re.MULTILINE) == list(REPLICA_IDS)
    assert "stick match req.hdr(mcp-session-id)" in text and "uri /healthz" in text


def test_the_nginx_config_routes_each_replicas_session_prefix() -> None:
    text = (FLEET / "nginx.conf").read_text()
    for n, name in enumerate(REPLICA_IDS, 1):
        assert f"~^{name}\\.  replica_{n};" in text
        block = re.search(rf"upstream replica_{n} \{{(.*?)\}}", text, re.DOTALL)
        assert block is not None and f"server {name}:8765 max_fails" in block.group(1)
        assert block.group(1).count(" backup;") == 2  # a dead replica's session reaches a live one: 404
    assert "default        replicas;" in text


def test_the_compose_file_has_redis_three_replicas_and_haproxy_with_health_checks() -> None:
    compose: dict[str, Any] = yaml.safe_load((FLEET / "compose.yaml").read_text())
    services = compose["services"]
    assert sorted(services) == sorted(["redis", *REPLICA_IDS, "haproxy"])
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name in REPLICA_IDS:
        replica = services[name]
        assert replica["environment"]["FRUGAL_REPLICA_ID"] == name
        assert "FRUGAL_AUTH_TOKEN" in replica["environment"]
        assert replica["command"][:4] == ["serve", "--http", "0.0.0.0:8765", "--stateless"]
        assert "/healthz" in " ".join(replica["healthcheck"]["test"])
        # one folder for every ledger; the config that puts their state in Redis
        assert replica["volumes"] == ["usage:/home/frugal/.frugal/usage", "./frugal.toml:/app/frugal.toml:ro"]
        assert replica["environment"]["FRUGAL_REDIS_URL"] == "redis://redis:6379/0"
        assert replica["depends_on"]["redis"]["condition"] == "service_healthy"
    balancer = services["haproxy"]
    assert balancer["volumes"] == ["./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"]
    assert {balancer["environment"][f"FRUGAL_REPLICA_{n}"] for n in (1, 2, 3)} == {f"{r}:8765" for r in REPLICA_IDS}
    assert all(balancer["depends_on"][name]["condition"] == "service_healthy" for name in REPLICA_IDS)
    forwarded = services["replica-1"]["command"][services["replica-1"]["command"].index("--forwarded-allow-ips") + 1]
    assert balancer["networks"]["fleet"]["ipv4_address"] == forwarded  # only HAProxy's X-Forwarded-For
    assert "usage" in compose["volumes"]
    mounted = config.load(FLEET / "frugal.toml", {"FRUGAL_REDIS_URL": "redis://redis:6379/0"})
    assert mounted.state.backend == "redis" and "notes" in mounted.upstreams
    assert re.search(r'pip install .*"\$\{wheel\}\[[^]]*\bredis\b', (ROOT / "Dockerfile").read_text())  # its client


def refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


async def list_through(front: str) -> list[str]:
    """The tool names through `front`, once HAProxy has taken the replicas in (their first
    health checks pass a second or two after they listen)."""
    with deadline(120):
        while True:
            try:
                async with Client(front, mode="auto", cache=None) as session:
                    return [tool.name for tool in (await session.list_tools()).tools]
            except Exception:  # 503 from HAProxy until a replica is up
                await anyio.sleep(0.2)


async def wait_state_ok(healthz: str) -> None:
    """Until a replica's /healthz through the front says `"state": "ok"`: its Redis answers (a
    replica started before Redis did recovers within a second). The memory backend has no
    `state`: this waits out its deadline and the test fails."""
    with deadline(60):
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            # another process's state, over HTTP: asked again until it holds
            while (await http.get(healthz)).json().get("state") != "ok":  # noqa: ASYNC110
                await anyio.sleep(0.2)


def test_run_fleet_serves_through_haproxy_and_stops_everything_on_sigterm(tmp_path: Path) -> None:
    lines: list[str] = []
    with reserved_port() as port:
        process = subprocess.Popen(
            [sys.executable, str(FLEET / "run_fleet.py"), "--port", str(port), "--home", str(tmp_path / "home")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        show_stderr_on_failure(process, lines)
        reader = threading.Thread(
            target=lambda: lines.extend(raw.decode(errors="replace").rstrip("\n") for raw in process.stderr or ()),
            daemon=True,
        )
        reader.start()
        try:
            assert process.stdout is not None
            front = process.stdout.readline().decode().strip()
            assert front == f"http://127.0.0.1:{port}/mcp", lines
            names = anyio.run(list_through, front)
            assert "frugal__fetch_slice" in names or any(name.startswith("frugal__") for name in names)
            # redis-server is installed here: the replicas keep their state in the one it started
            # (/healthz has no "state" with the memory backend)
            anyio.run(wait_state_ok, f"http://127.0.0.1:{port}/healthz")
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(paced(60)) == 0
            reader.join(10)
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
    replicas = [m.group(1) for line in lines if (m := re.search(r"listening on http://([^/]+)/mcp", line))]
    assert len(replicas) == 3, lines
    assert all(refused(address) for address in [*replicas, f"127.0.0.1:{port}"])
    assert any(
        re.search(r"run_fleet: redis-server on 127\.0\.0\.1:\d+, the replicas' \[state\]", line) for line in lines
    )
