"""The README's demo (examples/demo.py) as a person runs it: the routed search answered by the
library on attempt 2 after flaky failed, exact costs, a cut extraction with its receipt,
frugal__execute's capability, and the protocol tour; and its config as `config check` reads it.

The demo must not reach the network, and this file checks that it does not rather than trusting
the config's deny lists: every Python process of the run (the demo, `frugal-proxy serve`, the
library and notes servers) starts with a sitecustomize from tmp_path whose audit hook refuses a
DNS lookup of any name but a loopback one and any connect to a non-loopback address, and writes
both down; the test asserts that nothing was written down, and that each process loaded the
hook. HTTP(S)_PROXY point at a closed loopback port besides (the demo sets that for its own
children too), so a client that bypasses the hook still fails fast.

The strict xfails at the end are bugs of the routed tools that the demo works around (they turn
into failures once fixed: then drop the workaround in examples/demo.py and the mark here).
"""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from tests.pace import deadline, paced

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo.py"
CONFIG = ROOT / "examples" / "demo" / "frugal.toml"
PAGE = "https://library.example/doc/failover-field-guide"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")

# Loaded by every Python process of the run (PYTHONPATH): refuse and note any attempt to leave
# the machine, and note that the hook is in place.
SITECUSTOMIZE = """
import ipaddress, os, socket, sys

_LOG = os.environ.get("FRUGAL_TEST_NET_LOG")


def _note(line):
    with open(_LOG, "a", encoding="utf-8") as log:
        log.write(line + "\\n")


def _local(host):
    if host is None or host in ("localhost", b"localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback
    except ValueError:
        return False


def _hook(event, args):
    if event == "socket.getaddrinfo" and not _local(args[0]):
        _note(f"blocked {os.getpid()} getaddrinfo {args[0]!r}")
        raise socket.gaierror(socket.EAI_NONAME, "the demo test allows no DNS lookup")
    if event == "socket.connect":
        sock, address = args
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
            _note(f"blocked {os.getpid()} connect {address!r}")
            raise ConnectionRefusedError("the demo test allows no connection off this machine")


if _LOG:
    _note(f"loaded {os.getpid()} {' '.join(sys.orig_argv)}")
    sys.addaudithook(_hook)
"""


@pytest.fixture
def offline(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """An environment whose Python processes cannot leave the machine, and the log of attempts."""
    hook = tmp_path / "offline"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    log = tmp_path / "net.log"
    with socket.socket() as refusing:  # bound, never listening: a connection is refused at once
        refusing.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{refusing.getsockname()[1]}"
        env = {**os.environ, "PYTHONPATH": str(hook), "FRUGAL_TEST_NET_LOG": str(log), "FRUGAL_STATS": "off"}
        env.update(dict.fromkeys(PROXY_VARIABLES, closed))
        env.update(NO_PROXY="", no_proxy="")
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.pop("FRUGAL_CONFIG", None)
        yield env, log


def log_lines(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def has(output: str, *phrases: str) -> bool:
    """Whether the output has these phrases in a row, however the columns pad and wrap them."""
    words = [word for phrase in phrases for word in phrase.split()]
    return re.search(r"\s+".join(re.escape(word) for word in words), output) is not None


@pytest.mark.timeout(240)
def test_the_demo_shows_a_routed_search_a_failover_a_cut_and_the_costs(offline: tuple[dict[str, str], Path]) -> None:
    env, log = offline
    run = subprocess.run(
        [sys.executable, str(DEMO)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=paced(200), check=False
    )
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert out.startswith("frugal-proxy demo: routed tools, offline, no keys")
    # 1-2: the routed search, answered by library on attempt 2 after flaky failed
    assert has(out, "answered by", "library for $0.002")
    assert has(out, "hit 1", "Failover between search providers: a field guide", f"<{PAGE}>")
    assert has(out, "attempt 1", "flaky", "error", "$0", "transient:")
    assert has(out, "the mirror is down for maintenance")
    assert has(out, "attempt 2", "library", "won", "$0.002")
    assert has(out, "provider=library won on attempt 2")
    # 3: the page read, its cut, the receipt and the rest fetched back
    assert has(out, "answered by", "library-pages for $0.0005")
    cut = re.search(r"cut\s+structuredContent\.markdown \(text mode\): kept ([\d,]+) of ([\d,]+) bytes", out)
    assert cut is not None, out
    kept, total = (int(number.replace(",", "")) for number in cut.groups())
    assert 0 < kept < total
    assert re.search(r"receipt\s+artifact art_[A-Za-z0-9_-]{32}, sha256 [0-9a-f]{16}…,\s+ed25519:", out)
    assert has(out, "verified", "the signature is valid")
    assert has(out, "kept + rest == the page frugal__extract read")
    assert has(out, "a repeat", "denied: this exact call to read_page")
    # 4: execute says where each intent went
    assert has(out, "capability", "search, answered by library")
    assert has(out, "reason", "no URL: routed to a web search;")
    assert has(out, "capability", "browse, answered by library-render")
    assert has(out, "the extraction came back nearly empty: rendered in a browser")
    # 5: the costs, exact
    assert has(out, "frugal__search", "$0.002", "$0.002", "flaky $0 error -> library $0.002 won")
    assert has(out, "frugal__extract", "$0.0005", "$0.0005", "library-pages $0.0005 won")
    assert has(out, "execute: browse", "$0.003", "$0.0035", "library-pages $0.0005 empty -> library-render $0.003 won")
    assert has(out, "spent in this demo", "$0.008")
    # then the protocol tour, both eras
    assert has(out, "mode=auto", "protocol 2026-07-28") and has(out, "mode=legacy", "protocol 2025-11-25")
    assert out.count("add(2, 3) ok, echo ok") == 2
    assert out.rstrip().endswith("every part worked")
    # nothing tried to leave the machine, and every process had the hook that would have said so
    lines = log_lines(log)
    assert not [line for line in lines if line.startswith("blocked")], lines
    loaded = "\n".join(line for line in lines if line.startswith("loaded"))
    for process in ("examples/demo.py", "frugal_proxy serve --config", "library_server.py", "notes_server.py"):
        assert process in loaded, lines


def test_the_demo_config_loads(offline: tuple[dict[str, str], Path]) -> None:
    env, log = offline
    check = subprocess.run(
        [sys.executable, "-m", "frugal_proxy", "config", "check", "--config", "examples/demo/frugal.toml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=paced(50),
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("examples/demo/frugal.toml: valid; 1 upstream(s)")
    assert has(check.stdout, "library-server", "up", "speaks 2026-07-28")
    for tool in ("search", "read_page", "render_page", "mirror_search"):
        assert has(check.stdout, tool, "library-server")
    assert not [line for line in log_lines(log) if line.startswith("blocked")]


# -- bugs of the routed tools that the demo works around -------------------------------------------


def serve(env: dict[str, str], config: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "frugal_proxy", "serve", "--config", str(config)], cwd=ROOT, env=env
    )


def demo_config(tmp_path: Path, text: str | None = None) -> Path:
    path = tmp_path / "frugal.toml"
    path.write_text(CONFIG.read_text(encoding="utf-8") if text is None else text, encoding="utf-8")
    return path


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def call_through(env: dict[str, str], config: Path, mode: str, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """The results of these tool calls, made in order by one client of `serve --config config`."""
    with deadline(50):
        async with Client(serve(env, config), mode=mode) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]


@pytest.mark.anyio
async def test_a_2026_client_gets_routed_answers_from_upstream_tools(
    tmp_path: Path, offline: tuple[dict[str, str], Path]
) -> None:
    env, _ = offline
    calls = ("frugal__search", {"query": "failover", "max_results": 2})
    [result] = await call_through(env, demo_config(tmp_path), "auto", calls)
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict)
    assert result.structured_content["provider_used"] == "library"


@pytest.mark.anyio
async def test_the_governor_cuts_a_routed_page_and_keeps_its_receipt(
    tmp_path: Path, offline: tuple[dict[str, str], Path]
) -> None:
    """The page's markdown is cut to the route's budget, the receipt rides whole, the marker is a
    text block of its own, and the omission receipt's artifact gives back the whole markdown."""
    env, _ = offline
    text = CONFIG.read_text(encoding="utf-8") + '\n[governor.routes."frugal__extract"]\nmax_bytes = 2048\n'
    with deadline(50):
        async with Client(serve(env, demo_config(tmp_path, text)), mode="legacy") as client:
            result = await client.call_tool("frugal__extract", {"url": PAGE})
            assert not result.is_error, text_of(result)
            report = (result.meta or {})["frugal/governor"]
            receipt = report["receipts"][0]
            whole, offset = b"", 0
            while offset is not None:
                piece = await client.call_tool(
                    "frugal__fetch_slice", {"artifact_id": receipt["artifact_id"], "offset": offset}
                )
                assert isinstance(piece.structured_content, dict), text_of(piece)
                whole += base64.b64decode(piece.structured_content["data_base64"])
                offset = piece.structured_content["next_offset"]
    assert isinstance(result.structured_content, dict)
    assert [a["provider"] for a in result.structured_content["attempts"]] == ["library-pages"]
    assert receipt["field"] == "structuredContent.page.markdown"
    assert not report.get("over_budget")
    kept = result.structured_content["page"]["markdown"]
    assert len(kept.encode()) < receipt["total_bytes"] == len(whole)
    assert whole.decode().startswith(kept) and len(whole) > len(kept.encode())
    assert any("frugal__fetch_slice" in block.text for block in result.content[1:] if block.type == "text")


@pytest.mark.anyio
async def test_a_provider_named_like_its_upstream_leaves_the_upstream_tools_callable(
    tmp_path: Path, offline: tuple[dict[str, str], Path]
) -> None:
    env, _ = offline
    text = CONFIG.read_text(encoding="utf-8")
    text = text.replace("[upstreams.library-server]", "[upstreams.library]")
    text = text.replace('upstream = "library-server"', 'upstream = "library"')
    routed, plain = await call_through(
        env,
        demo_config(tmp_path, text),
        "legacy",
        ("frugal__search", {"query": "failover", "max_results": 1}),
        ("read_page", {"url": PAGE}),
    )
    assert not routed.is_error, text_of(routed)
    assert not plain.is_error, text_of(plain)
