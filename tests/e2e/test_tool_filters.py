"""`[upstreams.NAME] tools = { allow, deny }` under `serve`: a hidden tool is neither listed nor
callable, with one upstream and with several, over stdio and `--http`, for a client of either era.

server-everything's `get-env` answers with the server's environment, which is the proxy's: the
starter config denies it. Its answer must never reach a client, whatever the upstream count.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import PaginatedRequestParams, TextContent

from tests.conftest import ROOT, everything_command, notes_command
from tests.e2e.test_http_downstream import Proxy
from tests.pace import deadline

pytestmark = pytest.mark.anyio

CHANGING = [sys.executable, str(ROOT / "tests" / "servers" / "changing_tools_server.py")]
SECRET = "frugal-test-secret-4711"  # in the proxy's environment, so in get-env's answer


def write_config(tmp_path: Path, several: bool) -> Path:
    path = tmp_path / "frugal.toml"
    notes = f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\ntools = {{ allow = ['add', 'echo'] }}\n"
    path.write_text(
        f"""
[upstreams.everything]
command = {json.dumps(everything_command())}
tools = {{ deny = ["get-env"] }}
{notes if several else ""}
"""
    )
    return path


@asynccontextmanager
async def served(config: Path, home: Path, transport: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config)]
    env = {**os.environ, "FRUGAL_HOME": str(home), "FRUGAL_STATS": "off", "FRUGAL_TEST_SECRET": SECRET}
    if transport == "stdio":
        server = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
        async with Client(server, mode=mode, cache=None, **options) as client:  # type: ignore[arg-type]
            yield client
        return
    proxy = Proxy([*argv, "--http", "127.0.0.1:0"], env)
    try:
        url = await anyio.to_thread.run_sync(proxy.wait_listening)
        async with Client(url, mode=mode, cache=None, **options) as client:  # type: ignore[arg-type]
            yield client
    finally:
        await anyio.to_thread.run_sync(proxy.stop)


async def every_tool(client: Client) -> list[str]:
    names: list[str] = []
    cursor = None
    for _ in range(100):
        page = await client.session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        names.extend(tool.name for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return names
    raise AssertionError("the tool list did not end")


def text(result: Any) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("several", [False, True], ids=["one-upstream", "two-upstreams"])
async def test_a_hidden_tool_is_neither_listed_nor_callable(
    tmp_path: Path, several: bool, transport: str, mode: str
) -> None:
    config = write_config(tmp_path, several)
    prefix = "everything__" if several else ""
    with deadline(90):
        async with served(config, tmp_path / "home", transport, mode) as client:
            names = await every_tool(client)
            assert f"{prefix}echo" in names and f"{prefix}get-sum" in names
            assert f"{prefix}get-env" not in names

            refused = await client.call_tool(f"{prefix}get-env", {})
            assert refused.is_error
            assert SECRET not in text(refused)
            assert "'get-env' is denied by upstreams.everything.tools.deny ('get-env')" in text(refused)

            summed = await client.call_tool(f"{prefix}get-sum", {"a": 2, "b": 3})
            assert text(summed) == "The sum of 2 and 3 is 5."  # every other call keeps working
            if several:  # an allow list hides what it does not match
                assert "notes__add" in names and "notes__blob" not in names
                blob = await client.call_tool("notes__blob", {"size": 10})
                assert blob.is_error and "'blob' is not matched by upstreams.notes.tools.allow" in text(blob)
                assert text(await client.call_tool("notes__add", {"a": 1, "b": 2})) == "3"


# The modern client is pinned to 2026-07-28: auto's server/discover probe gives up after 10 s and
# settles on the session era, which two upstreams starting on a loaded machine can take.
@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
@pytest.mark.parametrize("several", [False, True], ids=["one-upstream", "two-upstreams"])
async def test_the_tools_a_list_change_brings_are_filtered_too(tmp_path: Path, several: bool, mode: str) -> None:
    config = tmp_path / "frugal.toml"
    notes = f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n" if several else ""
    config.write_text(
        f'[upstreams.changing]\ncommand = {json.dumps(CHANGING)}\ntools = {{ deny = ["secret-*"] }}\n{notes}'
    )
    prefix = "changing__" if several else ""
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if type(getattr(message, "root", message)).__name__ == "ToolListChangedNotification":
            changed.set()

    # (a message handler makes the SDK's auto mode settle on the session era: modern gets none)
    options = {"message_handler": on_message} if mode == "legacy" else {}
    with deadline(90):
        async with served(config, tmp_path / "home", "stdio", mode, **options) as client:
            before = await every_tool(client)  # what the proxy caches of several upstreams
            assert f"{prefix}reveal" in before and f"{prefix}visible-added" not in before
            if mode == "legacy":
                assert text(await client.call_tool(f"{prefix}reveal", {})) == "revealed"
                await changed.wait()
            else:
                async with client.listen(tools_list_changed=True) as subscription:
                    assert subscription.honored.tools_list_changed is True
                    assert text(await client.call_tool(f"{prefix}reveal", {})) == "revealed"
                    async for event in subscription:
                        assert type(event).__name__ == "ToolsListChanged"
                        break
            after = await every_tool(client)
            assert f"{prefix}visible-added" in after  # the list was fetched again
            assert f"{prefix}secret-added" not in after
            refused = await client.call_tool(f"{prefix}secret-added", {})
            assert refused.is_error and "the secret tool ran" not in text(refused)
            assert "'secret-added' is denied by upstreams.changing.tools.deny ('secret-*')" in text(refused)
            assert text(await client.call_tool(f"{prefix}visible-added", {})) == "the visible tool ran"
