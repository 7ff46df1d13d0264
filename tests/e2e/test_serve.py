"""`frugal-proxy serve`: three real upstreams under one endpoint, for both eras of client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import PaginatedRequestParams, TextContent

from tests.conftest import ROOT, everything_command, modern_only_command, notes_command
from tests.pace import deadline, paced
from tests.rawclient import RawClient

pytestmark = pytest.mark.anyio

FILESYSTEM_JS = (
    ROOT / ".deps" / "node" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)


def write_config(tmp_path: Path, extra: str = "", page_size: int = 500, notes: list[str] | None = None) -> Path:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "hello.txt").write_text("hello from the files upstream\n")
    path = tmp_path / "frugal.toml"
    path.write_text(
        f"""
[upstreams.notes]
command = {json.dumps(notes or notes_command())}

[upstreams.everything]
command = {json.dumps(everything_command())}
tools = {{ deny = ["get-env"] }}

[upstreams.files]
command = {json.dumps(["node", str(FILESYSTEM_JS), str(data)])}

[limits]
page_size = {page_size}
{extra}
"""
    )
    return path


def serve(config: Path, home: Path) -> StdioServerParameters:
    env = {**os.environ, "FRUGAL_HOME": str(home)}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "frugal_proxy", "serve", "--config", str(config)], env=env
    )


def text(result: Any) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def direct_tool_names(command: list[str]) -> list[str]:
    async with Client(StdioServerParameters(command=command[0], args=command[1:]), mode="legacy", cache=None) as client:
        return [tool.name for tool in (await client.list_tools()).tools]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_three_upstreams_merge_and_route(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path)
    with deadline(60):
        expected = {f"notes__{name}" for name in await direct_tool_names(notes_command())}
        expected |= {f"files__{name}" for name in await direct_tool_names(["node", str(FILESYSTEM_JS), str(tmp_path)])}
        async with Client(serve(config, tmp_path / "home"), mode=mode, cache=None) as client:  # type: ignore[arg-type]
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert expected <= names
            assert "everything__echo" in names and "everything__get-env" not in names
            assert not {name for name in names if "__" not in name}
            assert text(await client.call_tool("notes__add", {"a": 2, "b": 3})) == "5"
            assert text(await client.call_tool("everything__get-sum", {"a": 2, "b": 3})) == "The sum of 2 and 3 is 5."
            listing = text(await client.call_tool("files__list_directory", {"path": str(tmp_path / "data")}))
            assert "hello.txt" in listing
            prompt = await client.get_prompt("notes__review", {"topic": "caching"})
            assert "Review caching" in str(prompt.messages[0].content)
            resources = (await client.list_resources()).resources
            everything_uri = next(str(r.uri) for r in resources if str(r.uri).startswith("demo://"))
            assert (await client.read_resource(everything_uri)).contents
            note = await client.read_resource("notes://welcome")  # routed by the notes template
            assert "governs every result" in note.contents[0].text  # type: ignore[union-attr]


async def test_pages_cross_upstreams(tmp_path: Path) -> None:
    config = write_config(tmp_path, page_size=7)
    with deadline(60):
        async with Client(serve(config, tmp_path / "home"), mode="auto", cache=None) as client:
            seen: list[str] = []
            cursor = None
            for _ in range(50):
                page = await client.session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                assert len(page.tools) <= 7
                seen.extend(tool.name for tool in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            assert len(seen) == len(set(seen)) > 30
            assert {"notes", "everything", "files"} <= {name.split("__")[0] for name in seen}


async def test_a_dead_upstream_fails_only_its_own_tools_and_comes_back(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with deadline(60):
        async with Client(serve(config, tmp_path / "home"), mode="legacy", cache=None) as client:
            await client.list_tools()
            crashed = await client.call_tool("notes__crash", {})
            assert crashed.is_error and "exited with status 3" in text(crashed)
            assert text(await client.call_tool("everything__get-sum", {"a": 1, "b": 1})) == "The sum of 1 and 1 is 2."
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "notes__add" in names  # still listed while it is down
            await anyio.sleep(0.6)  # the first restart backoff
            assert text(await client.call_tool("notes__add", {"a": 1, "b": 1})) == "2"


async def test_list_changed_reaches_a_modern_client(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    # Pinned to 2026-07-28: `auto` gives up on server/discover after the SDK's 10 s, which serve
    # starting three upstreams on a busy machine can take, and then listens in the session era.
    with deadline(60):
        async with Client(serve(config, tmp_path / "home"), mode="2026-07-28", cache=None) as client:
            async with client.listen(resources_list_changed=True) as sub:
                assert sub.honored.resources_list_changed is True
                await client.call_tool("notes__add_note", {"name": "z", "text": "zz"})
                async for event in sub:
                    assert type(event).__name__ == "ResourcesListChanged"
                    break


async def test_list_changed_reaches_a_legacy_client(tmp_path: Path) -> None:
    # From a 2026-07-28-only server, through the proxy's listen stream (the dual-era notes server
    # serves a session-era client in its own era, which sends no list_changed for add_note).
    config = write_config(tmp_path, notes=modern_only_command())
    seen = anyio.Event()

    async def on_message(message: Any) -> None:
        if type(getattr(message, "root", message)).__name__ == "ResourceListChangedNotification":
            seen.set()

    with deadline(60):
        async with Client(
            serve(config, tmp_path / "home"), mode="legacy", cache=None, message_handler=on_message
        ) as client:
            await client.call_tool("notes__add_note", {"name": "z", "text": "zz"})
            await seen.wait()


def serve_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(config)]


def serve_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "FRUGAL_HOME": str(tmp_path / "home")}


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FRUGAL_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "frugal_proxy", *args], capture_output=True, text=True, env=env, timeout=paced(60)
    )


def test_config_check_prints_the_catalog_and_refuses_collisions(tmp_path: Path) -> None:
    good = run_cli("config", "check", "--config", str(write_config(tmp_path)), home=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "notes__add" in good.stdout and "files__read_file" in good.stdout
    clash = tmp_path / "clash.toml"
    clash.write_text(
        f'[upstreams.a]\ncommand = {json.dumps(notes_command())}\nprefix = ""\n'
        f'[upstreams.b]\ncommand = {json.dumps(notes_command())}\nprefix = ""\n'
    )
    bad = run_cli("config", "check", "--config", str(clash), home=tmp_path)
    assert bad.returncode == 1
    assert "tool name 'add' is claimed by upstream 'a' (tool 'add') and upstream 'b' (tool 'add')" in bad.stderr


def test_config_check_lists_the_routed_tools_and_checks_each_named_upstream_tool(tmp_path: Path) -> None:
    def checked(tool: str, candidate: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "routed.toml"
        path.write_text(
            f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n"
            f'[search_providers.notes-search]\nupstream = "notes"\ntool = "{tool}"\n'
            f'[routes.say]\ncandidates = ["{candidate}"]\n'
        )
        return run_cli("config", "check", "--config", str(path), home=tmp_path)

    good = checked("echo", "notes.echo")
    assert good.returncode == 0, good.stderr
    catalog = {line.split()[0]: line.split(None, 1)[1] for line in good.stdout.splitlines() if line.startswith("  ")}
    assert catalog["echo"] == "notes" and catalog["say"] == "candidates: notes.echo"
    assert "notes-search" in catalog["frugal__search"].removeprefix("routed: ").split(", ")
    assert catalog["frugal__execute"].startswith("routed by intent: search")
    assert catalog["frugal__fetch_slice"] == "frugal-proxy"

    typo = checked("ehco", "notes.sya")
    assert typo.returncode == 1
    assert (
        "config error: at search_providers.notes-search.tool: 'ehco' is not one of the tools of upstream 'notes' "
        "(did you mean 'echo'?); its tools: add, echo, blob," in typo.stderr
    )
    assert "config error: at routes.say.candidates[0]: 'sya' is not one of the tools of upstream 'notes'" in typo.stderr


def test_config_errors_stop_serve_with_their_message(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text('[upstreams.a]\ncommand = ["x"]\ntimeout = "later"\n')
    result = run_cli("serve", "--config", str(broken), home=tmp_path)
    assert result.returncode == 2
    assert "at upstreams.a.timeout: 'later' is not a duration" in result.stderr


def test_config_init_writes_a_starter_once(tmp_path: Path) -> None:
    target = tmp_path / "cfg" / "frugal.toml"
    assert run_cli("config", "init", "--config", str(target), home=tmp_path).returncode == 0
    assert "[upstreams.everything]" in target.read_text()
    again = run_cli("config", "init", "--config", str(target), home=tmp_path)
    assert again.returncode == 1 and "exists" in again.stderr


async def test_status_shows_each_upstream(tmp_path: Path) -> None:
    config = tmp_path / "one.toml"
    config.write_text(
        f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n"
        '[upstreams.ghost]\ncommand = ["/nonexistent/server"]\n'
    )
    with deadline(60):
        async with Client(serve(config, tmp_path / "home"), mode="legacy", cache=None) as client:
            await client.call_tool("notes__add", {"a": 1, "b": 2})
            for _ in range(100):
                status = await anyio.to_thread.run_sync(lambda: run_cli("status", "--json", home=tmp_path / "home"))
                records = json.loads(status.stdout)
                if records and records[0]["upstreams"]["notes"]["state"] == "up":
                    break
                await anyio.sleep(0.2)
            upstreams = records[0]["upstreams"]
            assert upstreams["notes"]["state"] == "up"
            assert upstreams["ghost"]["state"] == "down" and "cannot start" in upstreams["ghost"]["reason"]
            ghost = await client.call_tool("ghost__anything", {})
            assert ghost.is_error and "upstream 'ghost' is down: cannot start" in text(ghost)


async def test_the_governor_table_shapes_results_of_serve(tmp_path: Path) -> None:
    config = write_config(tmp_path, extra="[governor]\nmax_bytes = 2048\n")
    with deadline(60):
        async with Client(serve(config, tmp_path / "home"), mode="auto", cache=None) as client:
            shaped = await client.call_tool("notes__blob", {"size": 50_000})
            assert len(text(shaped).encode()) < 2048
            assert "frugal__fetch_slice" in text(shaped)
            small = await client.call_tool("notes__echo", {"text": "short"})
            assert text(small) == "short"


async def test_sigterm_stops_the_upstreams_without_calling_it_a_crash(tmp_path: Path) -> None:
    """SIGTERM to serve ends each upstream politely (stdin closed, then SIGTERM, then SIGKILL,
    each after a grace period); that end is the proxy's doing, not an upstream that died."""
    faulty = [sys.executable, str(ROOT / "tests" / "servers" / "faulty_server.py")]
    config = tmp_path / "frugal.toml"
    # Two upstreams, one that takes 1.5 s to exit after its stdin closes (past the 1 s an
    # upstream that dies on its own is given before it is killed).
    config.write_text(
        f"[upstreams.everything]\ncommand = {json.dumps(everything_command())}\n"
        f'[upstreams.lingering]\ncommand = {json.dumps(faulty)}\nenv = {{ FAULTY_SLOW_EXIT = "1.5" }}\n'
    )
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, serve_command(config), env=serve_env(tmp_path))
        await client.initialize(wait=60)  # serve starts both upstreams first, slowly on a busy machine
        listed = await client.request(1, "tools/list", wait=60)
        names = {tool["name"] for tool in listed["result"]["tools"]}
        assert {"everything__echo", "lingering__echo"} <= names
        client.process.send_signal(signal.SIGTERM)
        with deadline(30):
            code = await client.process.wait()
        tg.cancel_scope.cancel()
    stderr = client.stderr_text()
    assert code in (0, 130, 143), stderr
    assert "upstream died" not in stderr and "killed by SIGKILL" not in stderr, stderr


def test_status_exits_1_in_both_forms_when_no_serve_runs(tmp_path: Path) -> None:
    text_form = run_cli("status", home=tmp_path / "home")
    json_form = run_cli("status", "--json", home=tmp_path / "home")
    assert (text_form.returncode, text_form.stdout.strip()) == (1, "no frugal-proxy serve is running")
    assert (json_form.returncode, json.loads(json_form.stdout)) == (1, [])


async def test_status_of_an_upstream_no_request_has_reached_shows_no_era_yet(tmp_path: Path) -> None:
    """A stdio serve spawns its upstreams at once but chooses each one's era with the client's
    first message; until then `status` says so instead of printing `era=None`."""
    config = tmp_path / "frugal.toml"
    config.write_text(f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\n")
    async with anyio.create_task_group() as tg:
        client = await RawClient.start(tg, serve_command(config), env=serve_env(tmp_path))
        with deadline(60):
            while True:  # the status file is rewritten every 2 s: wait for the one that shows it up
                listed = await anyio.to_thread.run_sync(lambda: run_cli("status", "--json", home=tmp_path / "home"))
                records = json.loads(listed.stdout)
                if records and records[0]["upstreams"]["notes"]["state"] == "up":
                    break
                await anyio.sleep(0.2)
        assert records[0]["upstreams"]["notes"]["era"] is None
        shown = await anyio.to_thread.run_sync(lambda: run_cli("status", home=tmp_path / "home"))
        code = await client.close()
        tg.cancel_scope.cancel()
    assert shown.returncode == 0 and code == 0, shown.stderr
    assert "era=None" not in shown.stdout
    assert "era=not chosen yet (at its first request)" in shown.stdout, shown.stdout
