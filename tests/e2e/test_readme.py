"""The README's snippets for the wrap form and for `serve`, run as written from the checkout.

The wrap snippet is the command an MCP client launches: the SDK's Client launches it and calls a
tool. The serve snippet runs in bash as it stands in the README (the venv activated, then
`serve --http`), and the README's curl line asks it for a routed search; only the port is
swapped for one this test holds, since other tests' servers share the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from tests.conftest import reserved_port
from tests.e2e.test_http_downstream import Proxy
from tests.pace import deadline, paced

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_PORT = "8765"

pytestmark = pytest.mark.anyio


def snippets(heading: str) -> list[str]:
    """The ```sh blocks of the README section under the heading that starts with `heading`."""
    text = README.read_text(encoding="utf-8")
    section = re.search(rf"^#+ {re.escape(heading)}.*?$(.*?)(?=^#)", text, re.MULTILINE | re.DOTALL)
    assert section is not None, f"the README has no section {heading!r}"
    return re.findall(r"^```sh\n(.*?)^```$", section.group(1), re.MULTILINE | re.DOTALL)


def environment(tmp_path: Path) -> dict[str, str]:
    """The user's environment, with a home of the test's own (ledger, status files)."""
    env = {key: value for key, value in os.environ.items() if key not in ("FRUGAL_CONFIG", "VIRTUAL_ENV")}
    env["FRUGAL_HOME"] = str(tmp_path / "home")
    return env


async def test_the_wrap_snippet_serves_the_notes_server(tmp_path: Path) -> None:
    (block,) = snippets("1. Wrap one server")
    (line,) = block.strip().splitlines()
    argv = shlex.split(line)
    assert argv[:2] == [".venv/bin/frugal-proxy", "--"], line
    # The client launches it from the checkout, as a user's shell there would.
    params = StdioServerParameters(command=str(ROOT / argv[0]), args=argv[1:], cwd=ROOT, env=environment(tmp_path))
    with deadline(60):
        async with Client(params, mode="auto") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"add", "echo", "blob"} <= names
            result = await client.call_tool("add", {"a": 2, "b": 3})
    assert not result.is_error
    assert isinstance(result.content[0], TextContent) and result.content[0].text == "5"


@pytest.mark.timeout(120)
def test_the_serve_snippet_answers_the_curl_snippets_routed_search(tmp_path: Path) -> None:
    serve, call = snippets("2. Many upstreams")
    assert f"--http 127.0.0.1:{README_PORT}" in serve and f"127.0.0.1:{README_PORT}/mcp" in call
    with reserved_port() as port:
        proxy = Proxy(["bash", "-c", serve.replace(README_PORT, str(port))], environment(tmp_path))
        try:
            assert proxy.wait_listening(60) == f"http://127.0.0.1:{port}/mcp"
            done = subprocess.run(
                ["bash", "-c", call.replace(README_PORT, str(port))],
                capture_output=True,
                text=True,
                timeout=paced(60),
                check=False,
            )
        finally:
            for pid in proxy.children():  # bash's child: the frugal-proxy the snippet started
                with contextlib.suppress(ProcessLookupError):  # gone already: the real failure shows
                    os.kill(pid, signal.SIGTERM)
            proxy.stop()
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["result"]
    assert result.get("isError") is not True, result
    answer = json.loads(result["content"][0]["text"])
    assert answer["provider_used"] == "library" and answer["cost_usd"] == 0.002
    assert [(attempt["provider"], attempt["outcome"]) for attempt in answer["attempts"]] == [
        ("flaky", "error"),
        ("library", "won"),
    ]
    assert 1 <= len(answer["results"]) <= 2
