"""The era an upstream is served in, and the description a client gets of it, do not depend on
how fast the upstream starts: a dual-era server that answers `server/discover` only after
`--probe-timeout` (it was still importing its modules on a busy machine, or it was stopped) is
described from its own answer and served in 2026-07-28, over stdio and over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import FAULTY_SERVER, ROOT, notes_command, params, proxy_command, reserved_port
from tests.e2e.test_http_downstream import Proxy, start
from tests.e2e.test_notes_server_http import _wait_listening
from tests.pace import deadline
from tests.rawclient import MODERN_META, RawClient

pytestmark = pytest.mark.anyio

SLOW_START = [sys.executable, str(ROOT / "tests" / "servers" / "slow_start.py")]
NOTES_INSTRUCTIONS = "A tiny notebook: add numbers, echo text, produce large outputs on request."


async def described(client: Client) -> dict[str, Any]:
    """What the proxy's answer to the client's `server/discover` says of the server."""
    raw = await client.session.send_discover("2026-07-28")
    tools = raw.get("capabilities", {}).get("tools") or {}
    return {
        "name": raw.get("_meta", {}).get("io.modelcontextprotocol/serverInfo", {}).get("name"),
        "instructions": raw.get("instructions"),
        "tools.listChanged": tools.get("listChanged"),
    }


# The notes server's own answer to server/discover (its initialize says listChanged false).
NOTES_DISCOVERED = {"name": "notes", "instructions": NOTES_INSTRUCTIONS, "tools.listChanged": True}


def imported(ready: Path) -> None:
    """Block until slow_start.py says its imports are done (run it in a thread)."""
    with ready.open() as fifo:
        fifo.readline()


@pytest.mark.parametrize("downstream", ["stdio", "http"])
async def test_a_dual_era_upstream_that_starts_after_the_probe_timeout_is_described_by_itself(
    downstream: str, tmp_path: Path
) -> None:
    """It reads its first request 3 s after it came; the probe gives up after 0.3 s. The
    client's first server/discover, sent once the server has imported what it needs (the SDK
    client waits 10 s for an answer), still gets the server's capabilities, name and
    instructions, and its calls are served in 2026-07-28."""
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    upstream = [*SLOW_START, "3", str(ready)]
    options = ("--probe-timeout", "0.3", "--log-level", "info")
    proxy = start(upstream, *options) if downstream == "http" else None
    try:
        target: Any = params(proxy_command(upstream, *options)) if proxy is None else proxy.url
        with deadline(90):
            # 2026-07-28 from the start: nothing is sent before the discover below.
            async with Client(target, mode="2026-07-28", cache=None) as client:
                await anyio.to_thread.run_sync(imported, ready)
                assert await described(client) == NOTES_DISCOVERED
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
    finally:
        if proxy is not None:
            proxy.stop()


async def test_a_remote_dual_era_upstream_stopped_past_the_probe_timeout_is_not_downgraded() -> None:
    """The notes server over HTTP, stopped (SIGSTOP) while the proxy probes it: the connection
    is accepted but nothing answers within 0.5 s. Once it runs again it answers, and the proxy
    serves it in 2026-07-28 (described by its discover answer), not in the session era."""
    with reserved_port() as port:
        command = [*notes_command(), "--http", f"127.0.0.1:{port}"]
        server = await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        with deadline(40):
            await _wait_listening(server, port)
    try:
        os.kill(server.pid, signal.SIGSTOP)
        url = f"http://127.0.0.1:{port}/mcp"
        proxy = Proxy(proxy_command([url], "--http", "127.0.0.1:0", "--probe-timeout", "0.5", "--log-level", "info"))
        try:
            await anyio.to_thread.run_sync(proxy.wait_for_line, "server/discover", "timed out")
            os.kill(server.pid, signal.SIGCONT)
            served = await anyio.to_thread.run_sync(proxy.wait_listening, 60.0)
            with deadline(60):
                async with Client(served, mode="2026-07-28", cache=None) as client:
                    assert await described(client) == NOTES_DISCOVERED
                    assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
        finally:
            proxy.stop()
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.terminate()
        with deadline(15):
            await server.wait()


async def test_a_session_era_fallback_after_an_unanswered_probe_is_logged_at_warn() -> None:
    """A session-era server that never answers server/discover (nor refuses it) is served in the
    session era once it accepts initialize, and the proxy says why, at warn (the default level)."""
    upstream = ["env", "FAULTY_IGNORE_DISCOVER=1", sys.executable, str(FAULTY_SERVER)]
    with deadline(60):
        async with anyio.create_task_group() as tg:
            client = await RawClient.start(tg, proxy_command(upstream, "--probe-timeout", "0.3"))
            reply = await client.request(1, "tools/list", {"_meta": MODERN_META}, wait=45)
            assert "echo" in {tool["name"] for tool in reply["result"]["tools"]}
            assert await client.close() == 0
            tg.cancel_scope.cancel()
    said = client.stderr.decode()
    assert "warning" in said and "server/discover unanswered" in said and "--probe-timeout" in said, said
