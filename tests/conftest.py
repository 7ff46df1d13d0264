"""Shared fixtures: the real upstreams the tests run, directly and through the proxy."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client import session as sdk_session

from tests import pace

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


@contextmanager
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the block runs: bound, never listening.
    A port bound and closed again is free for any process's next port-0 bind (another test's
    server), and a connection meant to be refused would reach that server instead."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@contextmanager
def reserved_port() -> Iterator[int]:
    """A port on 127.0.0.1 kept for a server the test starts on it: held by a socket bound with
    SO_REUSEADDR that never listens, which no port-0 bind elsewhere takes, while a server binding
    it with SO_REUSEADDR too (uvicorn does) still can. Hold it until the server listens."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


SHOWN_LINES = 200  # of a process's stderr under a failing test's report: the last ones
_STDERR: list[tuple[subprocess.Popen[bytes], list[str]]] = []


def show_stderr_on_failure(process: subprocess.Popen[bytes], lines: list[str]) -> None:
    """Show `lines` (the process's stderr, still being collected) in the report of a failing
    test: the one that started the process, and every later one while the process runs (a
    module-scoped proxy's)."""
    _STDERR.append((process, lines))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for process, lines in _STDERR:
            status = "running" if process.poll() is None else f"exited with status {process.returncode}"
            shown = lines[-SHOWN_LINES:]
            cut = f"(the last {len(shown)} of {len(lines)} lines)\n" if len(shown) < len(lines) else ""
            title = f"stderr of pid {process.pid} ({status}): {subprocess.list2cmdline(process.args)[:160]}"  # type: ignore[arg-type]
            report.sections.append((title, cut + "\n".join(shown)))
    if report.when == "teardown":
        _STDERR[:] = [(process, lines) for process, lines in _STDERR if process.poll() is None]
    return report


PACES: dict[str, float] = {}  # worker id -> the pace it measured (the controller's report)


def pytest_configure(config: pytest.Config) -> None:
    try:
        given = os.environ.get(pace.ENVIRONMENT)
        if given:
            pace.parse(given)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's per-test timeout (the ini's, or a test's own `timeout` marker) scaled by
    the pace (tests/pace.py), so that a loaded machine is given the time it needs: a marker
    placed before the test's own, which pytest-timeout reads first."""
    base = getattr(config, "_env_timeout", None)
    if not items or (base is None and not any(item.get_closest_marker("timeout") for item in items)):
        return
    factor = pace.factor()
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["pace"] = factor
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = marker.kwargs.get("timeout", marker.args[0] if marker.args else None) if marker else base
        if not seconds:  # no timeout, or 0: pytest-timeout's "none"
            continue
        kwargs = {**(marker.kwargs if marker else {}), "timeout": float(seconds) * factor}
        item.add_marker(pytest.mark.timeout(**kwargs), append=False)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """(xdist, in the controller) note the pace a worker measured, for the summary."""
    measured = getattr(node, "workeroutput", {}).get("pace")
    if measured is not None:
        PACES[str(node.gateway.id)] = float(measured)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not PACES and getattr(config, "workerinput", None) is None and pace.factor.cache_info().currsize:
        PACES["main"] = pace.factor()
    if PACES:
        shown = ", ".join(f"{worker} {factor:.2f}" for worker, factor in sorted(PACES.items()))
        terminalreporter.write_line(f"pace (deadlines scaled by, tests/pace.py): {shown}")


@pytest.fixture(autouse=True, scope="session")
def sdk_discover_timeout() -> Iterator[None]:
    """The SDK client in `mode="auto"` waits DISCOVER_TIMEOUT_SECONDS (10 s) for its
    `server/discover` probe, then settles on the session era: a proxy starting its upstreams on a
    loaded machine can take that long to answer, and the client would test another era than
    the test meant. The reference peer's probe is paced like every other wait here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sdk_session, "DISCOVER_TIMEOUT_SECONDS", pace.paced(sdk_session.DISCOVER_TIMEOUT_SECONDS))
        yield


@pytest.fixture(params=["auto", "legacy"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def frugal_logger() -> Iterator[None]:
    """Each test starts with the `frugal_proxy` logger as logging left it: a command run in
    process (`stats`, `config check`) configures it for stderr and stops it propagating, which
    would hide later tests' records from caplog in the same worker."""
    root = logging.getLogger("frugal_proxy")
    saved = root.handlers[:], root.level, root.propagate
    yield
    root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


@pytest.fixture(autouse=True)
def frugal_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Signing keys and other state go to a temporary FRUGAL_HOME, never the real home (child
    processes inherit it through the environment)."""
    home = tmp_path_factory.mktemp("frugal-home")
    monkeypatch.setenv("FRUGAL_HOME", str(home))
    return home
