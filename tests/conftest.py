"""Shared fixtures: the real upstreams the tests run, directly and through the proxy."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from mcp import StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
NOTES_SERVER = ROOT / "examples" / "servers" / "notes_server.py"
FAULTY_SERVER = ROOT / "tests" / "servers" / "faulty_server.py"
MODERN_ONLY_SERVER = ROOT / "tests" / "servers" / "modern_only_server.py"
EVERYTHING_JS = (
    ROOT / ".deps" / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)


def everything_js() -> Path:
    """server-everything as installed by scripts/setup.sh; FRUGAL_EVERYTHING_JS overrides."""
    override = os.environ.get("FRUGAL_EVERYTHING_JS")
    path = Path(override) if override else EVERYTHING_JS
    if not path.exists():
        pytest.fail(f"server-everything is not installed at {path}: run scripts/setup.sh")
    return path


def notes_command() -> list[str]:
    return [sys.executable, str(NOTES_SERVER)]


def modern_only_command() -> list[str]:
    """The notes server in 2026-07-28 only (it refuses initialize): what a session-era client
    must be bridged to, where the dual-era notes server would serve it in its own era."""
    return [sys.executable, str(MODERN_ONLY_SERVER)]


def everything_command() -> list[str]:
    node = shutil.which("node")
    assert node is not None, "node is required for server-everything"
    return [node, str(everything_js()), "stdio"]


def proxy_command(upstream: list[str], *options: str) -> list[str]:
    return [sys.executable, "-m", "frugal_proxy", *options, "--", *upstream]


def params(command: list[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    merged = {**os.environ, **(env or {})}
    return StdioServerParameters(command=command[0], args=command[1:], env=merged)


@pytest.fixture(params=["notes", "everything"])
def upstream(request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    name = request.param
    return name, notes_command() if name == "notes" else everything_command()


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def frugal_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Signing keys and other state go to a temporary FRUGAL_HOME, never the real home (child
    processes inherit it through the environment)."""
    home = tmp_path_factory.mktemp("frugal-home")
    monkeypatch.setenv("FRUGAL_HOME", str(home))
    return home
