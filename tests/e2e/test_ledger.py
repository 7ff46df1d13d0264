"""The usage ledger through `frugal-proxy serve` and the wrap form, as a user has it: every call
appends one line to $FRUGAL_HOME/usage/YYYY-MM.<replica>.jsonl once the process has it, a routed call and a
plain one alike, and `FRUGAL_STATS=off` writes nothing. Providers reach loopback Web APIs
(tests/servers/fake_apis.py); every other built-in is denied."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from frugal_proxy.ledger import reader
from frugal_proxy.state.usage import utc_month
from tests.conftest import notes_command
from tests.e2e.test_routed_tools import search_config
from tests.pace import deadline
from tests.servers.fake_apis import FakeApis, fake_apis

pytestmark = pytest.mark.anyio


@pytest.fixture
def apis() -> Iterator[FakeApis]:
    with fake_apis() as running:
        yield running


def proxy(home: Path, args: list[str], **env: str) -> StdioServerParameters:
    environ = {**os.environ, "FRUGAL_HOME": str(home), **env}
    environ.pop("FRUGAL_CONFIG", None)
    return StdioServerParameters(command=sys.executable, args=["-m", "frugal_proxy", *args], env=environ)


def ledger_lines(home: Path) -> list[dict[str, Any]]:
    """This month's lines, from every file of the month (one per replica id)."""
    return [
        json.loads(line)
        for path in reader.month_files(utc_month(time.time()), home / "usage")
        for line in path.read_text().splitlines()
        if line
    ]


async def test_a_routed_call_and_a_plain_call_each_append_one_line(tmp_path: Path, apis: FakeApis) -> None:
    config = tmp_path / "frugal.toml"
    config.write_text(search_config(apis))
    home = tmp_path / "home"
    with deadline(60):
        async with Client(proxy(home, ["serve", "--config", str(config)]), mode="auto", cache=None) as client:
            searched = await client.call_tool("frugal__search", {"query": "proxy secret-query"})
            added = await client.call_tool("add", {"a": 2, "b": 3})
            failed = await client.call_tool("frugal__search", {"query": "nothing"})
    assert not searched.is_error and not added.is_error and not failed.is_error
    search, plain, empty = ledger_lines(home)  # written by the time the process has exited
    assert (search["tool"], search["capability"], search["provider"], search["outcome"]) == (
        "frugal__search",
        "search",
        "wikipedia",
        "ok",
    )
    assert search["attempts"] == 1 and search["served_ms"].keys() == {"wikipedia"}
    assert search["rack_provider"] is not None and search["operator"] == "local"
    assert search["bytes_total"] == search["bytes_returned"] > 0 and search["tokens_total"] > 0
    assert (plain["tool"], plain["capability"], plain["provider"], plain["outcome"]) == ("add", None, "notes", "ok")
    assert (plain["cost_usd"], plain["rack_usd"]) == (0, 0)
    assert empty["outcome"] == "empty" and empty["provider"] == "wikipedia"
    [written] = reader.month_files(utc_month(time.time()), home / "usage")
    assert "secret-query" not in written.read_text()
    # The receipt counts them.
    environ = {**os.environ, "FRUGAL_HOME": str(home)}
    with deadline(30):
        done = await anyio.run_process([sys.executable, "-m", "frugal_proxy", "stats", "--json"], env=environ)
        shown = await anyio.run_process([sys.executable, "-m", "frugal_proxy", "stats"], env=environ)
    figures = json.loads(done.stdout)
    assert (figures["calls"], figures["failed_calls"], figures["paid_usd"]) == (3, 1, 0)
    assert shown.returncode == 0 and re.search(rb"\nsearch +wikipedia +1 +\$0\.0000\n", shown.stdout)


async def test_the_wrap_form_records_its_calls_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with deadline(60):
        async with Client(proxy(home, ["--", *notes_command()]), mode="auto", cache=None) as client:
            await client.call_tool("add", {"a": 1, "b": 1})
    assert [(line["tool"], line["provider"], line["outcome"]) for line in ledger_lines(home)] == [
        ("add", "notes_server", "ok")
    ]


async def test_frugal_stats_off_writes_nothing(tmp_path: Path, apis: FakeApis) -> None:
    config = tmp_path / "frugal.toml"
    config.write_text(search_config(apis))
    home = tmp_path / "home"
    params = proxy(home, ["serve", "--config", str(config)], FRUGAL_STATS="off")
    with deadline(60):
        async with Client(params, mode="auto", cache=None) as client:
            await client.call_tool("frugal__search", {"query": "proxy"})
            await client.call_tool("add", {"a": 2, "b": 3})
    assert not (home / "usage").exists()
