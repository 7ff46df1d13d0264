"""The status page's routes over real processes: `serve --http` answers /ui, its assets and
/ui/data under exactly the rules of /mcp (a set token required, a browser Origin that is not
allowed refused), with a Content-Security-Policy allowing only itself; /ui/data lists a call a
real client made; `frugal-proxy ui` serves the stdio serves' status files the same way and
asks for the token when one is set (its bind refusal: tests/proxy/cli/test_ui.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from frugal_proxy.cli.serve import STATUS_INTERVAL
from tests.conftest import notes_command
from tests.e2e.test_http_downstream import Proxy, modern_body, modern_headers, sdk_client, start
from tests.e2e.test_serve import serve_command, serve_env
from tests.pace import deadline, paced
from tests.rawclient import RawClient
from tests.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]

pytestmark = pytest.mark.anyio

TOKEN = "ui-s3cret-token"
PAGES = ("/ui", "/ui/status.css", "/ui/status.js", "/ui/favicon.svg", "/ui/data")


async def data_until(
    http: httpx2.AsyncClient, url: str, ready: Callable[[dict[str, Any]], bool], within: float = 60.0
) -> dict[str, Any]:
    """/ui/data once `ready` says it holds what a producer writes on its own clock (a status
    file every 2 s, a check-in every 5 s): polled a few times per producer period, no longer
    than `within` seconds; the deadline's failure shows the last answer."""
    data: dict[str, Any] = {}
    try:
        with deadline(within):
            while True:
                data = (await http.get(url)).json()
                if ready(data):
                    return data
                await anyio.sleep(STATUS_INTERVAL / 8)
    except TimeoutError:
        pytest.fail(f"/ui/data did not get there within {within:g} s; its last answer: {data}")


async def test_the_page_and_its_data_follow_the_mcp_endpoints_token_and_origin_rules() -> None:
    proxy = start(notes_command(), env={"FRUGAL_AUTH_TOKEN": TOKEN})
    try:
        body, headers = modern_body("tools/list"), modern_headers("tools/list")
        async with httpx2.AsyncClient(timeout=paced(20)) as http:

            async def statuses(**extra: str) -> list[int]:
                mcp = await http.post(proxy.url, json=body, headers={**headers, **extra})
                pages = [await http.get(f"{proxy.base}{path}", headers=extra) for path in PAGES]
                return [mcp.status_code, *(page.status_code for page in pages)]

            bearer = f"Bearer {TOKEN}"
            assert await statuses() == [401] * 6
            assert await statuses(Authorization="Bearer nope") == [401] * 6
            assert await statuses(Authorization=bearer) == [200] * 6
            assert await statuses(Authorization=bearer, Origin="https://evil.example") == [403] * 6
            assert await statuses(Authorization=bearer, Origin="http://localhost:3000") == [200] * 6
            assert await statuses(Authorization=bearer, Host="evil.example") == [403] * 6
            page = await http.get(f"{proxy.base}/ui", headers={"Authorization": bearer})
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert '<script src="/ui/status.js"' in page.text and "http" not in page.text.split("<body>")[0].replace(
            "http-equiv", ""
        ), "the page loads nothing from another origin"
        assert not any(TOKEN in line for line in proxy.lines)
    finally:
        proxy.stop()


async def test_ui_data_lists_a_call_a_client_made() -> None:
    proxy = start(notes_command())
    try:
        with deadline(60):
            async with sdk_client(proxy.url, "auto") as client:
                await client.list_tools()
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                data = (await http.get(f"{proxy.base}/ui/data")).json()
        assert data["schema"] == 1 and data["source"] == "serve" and data["replicas"] is None
        (serve,) = data["serves"]
        (upstream,) = serve["upstreams"]
        assert upstream["name"] == "notes_server" and upstream["state"] == "up"
        assert serve["providers"] == []  # the wrap form routes nothing
        (call,) = [call for call in serve["calls"] if call["tool"] == "add"]
        assert call["provider"] == "notes_server" and call["outcome"] == "ok" and call["cost"]["usd"] == "$0.0000"
        assert "arguments" not in json.dumps(call) and '"a"' not in json.dumps(call)
    finally:
        proxy.stop()


class UiProcess:
    """`frugal-proxy ui` on 127.0.0.1, its URL read from the first line it prints."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "frugal_proxy", "ui", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "FRUGAL_HOME": str(home), **(env or {})},
            text=True,
        )

    async def url(self) -> str:
        assert self.process.stdout is not None
        line = await anyio.to_thread.run_sync(self.process.stdout.readline)
        assert line.startswith("frugal-proxy ui: http://127.0.0.1:"), line + self.stop()
        return line.split(": ", 1)[1].strip()

    def stop(self) -> str:
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=paced(15))
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err


@pytest.fixture
def stdio_serve(tmp_path: Path) -> Iterator[Path]:
    config = tmp_path / "frugal.toml"
    config.write_text(f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n")
    yield config


async def test_the_ui_command_serves_the_stdio_serves_status_files(tmp_path: Path, stdio_serve: Path) -> None:
    home = tmp_path / "home"
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, serve_command(stdio_serve), env=serve_env(tmp_path))
        await client.initialize(wait=60)
        called = await client.request(2, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, wait=60)
        assert "result" in called, called
        ui = UiProcess(home)
        try:
            url = await ui.url()
            base = url.rsplit("/ui", 1)[0]
            async with httpx2.AsyncClient(timeout=paced(20)) as http:
                assert (await http.get(url)).status_code == 200
                assert (
                    await http.get(f"{base}/ui/data", headers={"Origin": "https://evil.example"})
                ).status_code == 403
                # The status file is rewritten every STATUS_INTERVAL: wait for one that holds the call.
                data = await data_until(http, f"{base}/ui/data", lambda d: any(s["calls"] for s in d["serves"]))
                calls = [call for serve in data["serves"] for call in serve["calls"]]
        finally:
            ui.stop()
        code = await client.close()
        tg.cancel_scope.cancel()
    assert code == 0
    assert data["source"] == "status files"
    (serve,) = data["serves"]
    assert serve["transport"] == "stdio" and [up["name"] for up in serve["upstreams"]] == ["notes"]
    assert serve["upstreams"][0]["state"] == "up", serve["upstreams"]
    assert [(call["tool"], call["provider"], call["outcome"]) for call in calls] == [("add", "notes", "ok")]


async def test_the_ui_command_asks_for_the_token_when_one_is_set(tmp_path: Path) -> None:
    ui = UiProcess(tmp_path / "home", env={"FRUGAL_AUTH_TOKEN": TOKEN})
    try:
        url = await ui.url()
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            assert (await http.get(url)).status_code == 401
            assert (await http.get(url, headers={"Authorization": f"Bearer {TOKEN}"})).status_code == 200
            data = await http.get(url + "/data", headers={"Authorization": f"Bearer {TOKEN}"})
        assert data.json()["serves"] == []
    finally:
        ui.stop()


async def test_ui_data_lists_the_replicas_that_share_the_redis(tmp_path: Path, redis_server: RedisServer) -> None:
    path = tmp_path / "frugal.toml"
    path.write_text(f'[state]\nbackend = "redis"\nurl = "{redis_server.url}"\n')
    home = {"FRUGAL_HOME": str(tmp_path / "home")}
    argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path), "--http", "127.0.0.1:0"]
    first = Proxy([*argv, "--replica-id", "replica-1"], home)
    second = Proxy([*argv, "--replica-id", "replica-2"], home)
    try:
        first.wait_listening()
        second.wait_listening()
        async with httpx2.AsyncClient(timeout=paced(20)) as http:
            # Each replica checks in at start, then every BEAT_EVERY seconds.
            data = await data_until(http, f"{first.base}/ui/data", lambda d: len(d["replicas"] or []) == 2)
        assert {(entry["replica"], entry["self"]) for entry in data["replicas"]} == {
            ("replica-1", True),
            ("replica-2", False),
        }
        assert data["serves"][0]["replica"] == "replica-1" and data["serves"][0]["state"] == "ok"
    finally:
        first.stop()
        second.stop()
