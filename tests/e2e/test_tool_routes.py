"""`[routes.NAME] candidates = [...]` under `serve`: one tool served by the tools of several real
upstreams, listed as its first listed candidate, failing over past an upstream that never
started and one that stopped answering, with a receipt naming who served it."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from tests.conftest import FAULTY_SERVER
from tests.e2e.test_bad_input import call, running, text
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

FAULTY = [sys.executable, str(FAULTY_SERVER)]
NEVER_STARTS = [sys.executable, "-c", "raise SystemExit(3)"]


def a_deadline() -> float:
    """Upstream a's call deadline: 1 s, paced (a loaded machine's faulty server answers the calls
    that must go through later), to a tenth of a second as the config writes it."""
    return round(paced(1), 1)


def config(tmp_path: Path, route: str) -> Path:
    path = tmp_path / "frugal.toml"
    path.write_text(
        f"""
[upstreams.gone]
command = {json.dumps(NEVER_STARTS)}

[upstreams.a]
command = {json.dumps(FAULTY)}
timeout = "{a_deadline():g}s"

[upstreams.b]
command = {json.dumps(FAULTY)}

[routes.echo]
{route}
"""
    )
    return path


def served(path: Path) -> list[str]:
    return [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path)]


def receipt(reply: dict[str, Any]) -> dict[str, Any]:
    return dict(reply["result"]["_meta"]["frugal/route"])


async def test_one_tool_served_by_several_upstreams_fails_over_and_says_who_served_it(tmp_path: Path) -> None:
    path = config(tmp_path, 'candidates = ["gone.echo", "a.echo", "b.echo"]')
    with deadline(60):
        async with running(served(path)) as client:
            await client.initialize()
            listed = (await client.request(1, "tools/list"))["result"]["tools"]
            [echo] = [tool for tool in listed if tool["name"] == "echo"]
            [a_echo] = [tool for tool in listed if tool["name"] == "a__echo"]
            assert echo == {**a_echo, "name": "echo"}  # the first listed candidate's declaration

            first = await call(client, 2, "echo", {"text": "hello"})
            assert text(first) == "hello"
            served_by = receipt(first)
            assert served_by["provider_used"] == "a.echo" and served_by["cost_usd"] == 0
            assert [(a["provider"], a["outcome"]) for a in served_by["attempts"]] == [
                ("gone.echo", "error"),
                ("a.echo", "won"),
            ]

            pid = int(text(await call(client, 3, "a__pid")))
            os.kill(pid, signal.SIGSTOP)
            try:
                stopped = await call(client, 4, "echo", {"text": "still here"})
            finally:
                os.kill(pid, signal.SIGCONT)
            assert text(stopped) == "still here"
            served_by = receipt(stopped)
            assert served_by["provider_used"] == "b.echo"
            attempts = served_by["attempts"]
            assert [(a["provider"], a["outcome"]) for a in attempts] == [
                ("gone.echo", "error"),
                ("a.echo", "error"),
                ("b.echo", "won"),
            ]
            # One deadline cuts the candidate's call, its upstream's: the error names that knob.
            assert f"did not answer within {a_deadline():g} s" in attempts[1]["error"]
            assert "upstreams.a.timeout" in attempts[1]["error"]


async def test_order_goes_first_and_a_route_whose_candidates_all_fail_names_each(tmp_path: Path) -> None:
    path = config(tmp_path, 'candidates = ["gone.echo", "a.nope"]\norder = ["a.nope"]')
    with deadline(60):
        async with running(served(path)) as client:
            await client.initialize()
            failed = await call(client, 1, "echo", {"text": "x"})
    assert failed["result"]["isError"] is True
    message = text(failed)
    assert message.startswith("echo failed on every provider (2 attempt(s)): a.nope refused the call")
    assert "gone.echo" in message
    assert [a["provider"] for a in receipt(failed)["attempts"]] == ["a.nope", "gone.echo"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_sdk_client_of_either_era_lists_and_calls_the_route(tmp_path: Path, mode: str) -> None:
    path = config(tmp_path, 'candidates = ["gone.echo", "b.echo"]')
    params = StdioServerParameters(command=sys.executable, args=["-m", "frugal_proxy", "serve", "--config", str(path)])
    with deadline(60):
        async with Client(params, mode=mode, cache=None) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("echo", {"text": "both eras"})
    assert {"echo", "b__echo"} <= names
    assert [block.text for block in result.content if isinstance(block, TextContent)] == ["both eras"]
    assert (result.meta or {})["frugal/route"]["provider_used"] == "b.echo"
