"""Tests mirror the package tree: every module under proxy/, providers/ and policies/ has its test
file at the mirrored path, and every such test file still has its module.

    proxy/router/routes.py   ->  tests/proxy/router/test_routes.py
    proxy/config.py          ->  tests/proxy/test_config.py
    providers/mcp_tool.py    ->  tests/providers/test_mcp_tool.py
    policies/metrics.py      ->  tests/policies/test_metrics.py

`__init__.py` and `__main__.py` need none. Outside the mirror: tests/e2e/ (whole processes
against real peers), tests/servers/ (the peers they run) and the helpers and tests at the top of
tests/. A module without a test file of its own goes on EXCEPTIONS with the reason; an entry
whose module has since got its test file, or is gone, fails too, so the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("proxy", "providers", "policies")
NEEDS_NO_TEST = frozenset({"__init__.py", "__main__.py"})

UPSTREAM_SPLIT = "the upstream split adds its tests"
EXCEPTIONS: dict[str, str] = {
    # Commands as a user runs them: arguments, stdio, exit status and signals need the process.
    "proxy/cli/http_options.py": "--http and starting the endpoint, end to end in tests/e2e/test_http_downstream.py",
    "proxy/install/mcp_install.py": (
        "the command against real client config trees, end to end in tests/e2e/test_mcp_install.py; "
        "its parts have test files of their own"
    ),
    # The 2024-11-05 transport needs a session-era session behind a real GET stream.
    "proxy/server/legacy_sse.py": "the HTTP+SSE pair, end to end in tests/e2e/test_http_streams.py with sse_client",
    "proxy/upstream/base.py": UPSTREAM_SPLIT,
    "proxy/upstream/http.py": UPSTREAM_SPLIT,
    "proxy/upstream/http_modern.py": UPSTREAM_SPLIT,
    "proxy/upstream/http_session.py": UPSTREAM_SPLIT,
    "proxy/upstream/http_sse.py": UPSTREAM_SPLIT,
    "proxy/upstream/http_wire.py": UPSTREAM_SPLIT,
    "proxy/upstream/stdio.py": UPSTREAM_SPLIT,
}


def modules() -> list[PurePosixPath]:
    """Every module of the three packages that needs a test file, relative to the repository."""
    return sorted(
        PurePosixPath(path.relative_to(ROOT).as_posix())
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name not in NEEDS_NO_TEST and "__pycache__" not in path.parts
    )


def mirror(module: PurePosixPath) -> PurePosixPath:
    return PurePosixPath("tests", *module.parent.parts, f"test_{module.name}")


def mirrored_tests() -> list[PurePosixPath]:
    """Every test file that stands for a module: those under tests/<package>/."""
    return sorted(
        PurePosixPath(path.relative_to(ROOT).as_posix())
        for package in PACKAGES
        for path in (ROOT / "tests" / package).rglob("test_*.py")
    )


def module_of(test: PurePosixPath) -> PurePosixPath:
    return PurePosixPath(*test.parent.parts[1:], test.name.removeprefix("test_"))


def test_every_module_has_its_test_file() -> None:
    missing = [
        f"{module} -> {mirror(module)}"
        for module in modules()
        if str(module) not in EXCEPTIONS and not (ROOT / mirror(module)).is_file()
    ]
    assert not missing, "modules without a test file (add it, or an exception with the reason):\n" + "\n".join(missing)


def test_every_test_file_has_its_module() -> None:
    stale = [f"{test} (no {module_of(test)})" for test in mirrored_tests() if not (ROOT / module_of(test)).is_file()]
    assert not stale, "test files whose module is gone (move or rename them with it):\n" + "\n".join(stale)


def test_the_exceptions_are_still_needed() -> None:
    known = {str(module) for module in modules()}
    gone = [name for name in EXCEPTIONS if name not in known]
    covered = [name for name in EXCEPTIONS if name in known and (ROOT / mirror(PurePosixPath(name))).is_file()]
    assert not gone, f"exceptions for modules that no longer exist (drop them): {gone}"
    assert not covered, f"exceptions for modules that now have their test file (drop them): {covered}"
    assert all(reason.strip() for reason in EXCEPTIONS.values())


def test_the_mirror_rule_itself() -> None:
    assert mirror(PurePosixPath("proxy/router/routes.py")) == PurePosixPath("tests/proxy/router/test_routes.py")
    assert mirror(PurePosixPath("proxy/config.py")) == PurePosixPath("tests/proxy/test_config.py")
    assert mirror(PurePosixPath("providers/mcp_tool.py")) == PurePosixPath("tests/providers/test_mcp_tool.py")
    assert module_of(PurePosixPath("tests/policies/test_metrics.py")) == PurePosixPath("policies/metrics.py")
    assert PurePosixPath("proxy/__main__.py") not in modules() and PurePosixPath("proxy/home.py") in modules()
