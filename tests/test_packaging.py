"""The distribution holds exactly the source tree and its licence files, and the installed CLI
answers.

pyproject maps proxy/, providers/ and policies/ onto `frugal_proxy` with `package-dir`, so
setuptools cannot discover subpackages by itself and a folder missing from its `packages`
list would silently drop out of a user's install. Building the wheel here turns that into a
failing test.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from tests.pace import paced

ROOT = Path(__file__).resolve().parents[1]
IMPORT_NAME = "frugal_proxy"
SOURCE_PACKAGES = {
    "proxy": IMPORT_NAME,
    "providers": f"{IMPORT_NAME}.providers",
    "policies": f"{IMPORT_NAME}.policies",
}
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".bench-venv",
    ".deps",
    "node_modules",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)


def source_modules() -> set[str]:
    """Dotted names of the .py files under the package folders, as the mapping places them."""
    modules = set()
    for folder, package in SOURCE_PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder).with_suffix("")
            if "__pycache__" not in relative.parts:
                modules.add(".".join((package, *relative.parts)))
    return modules


def wheel_modules(names: list[str]) -> set[str]:
    """Dotted names of the .py files in a wheel listing."""
    return {
        ".".join(PurePosixPath(name).with_suffix("").parts)
        for name in names
        if name.startswith(f"{IMPORT_NAME}/") and name.endswith(".py")
    }


def build_wheel(tmp_path: Path) -> Path:
    """Build a wheel from a clean copy of the checkout with this venv's build backend."""
    # A copy, because setuptools reuses build/lib in the source folder: a module deleted from
    # the tree would otherwise still ship from a previous build.
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    out = tmp_path / "dist"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    command = [
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", str(out), str(source),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=paced(170), env=env, check=False)
    assert done.returncode == 0, (
        "building the wheel failed (the test extra must bring a setuptools that reads this "
        f"pyproject):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.mark.timeout(180)
def test_wheel_ships_every_module_of_the_tree(tmp_path: Path) -> None:
    expected = source_modules()
    assert f"{IMPORT_NAME}.__init__" in expected, "the package folders were not found"

    built = build_wheel(tmp_path)
    with zipfile.ZipFile(built) as wheel:
        names = wheel.namelist()

    shipped = wheel_modules(names)
    assert shipped == expected, (
        f"missing from the wheel (list their packages in pyproject): {sorted(expected - shipped)}; "
        f"in the wheel but not in the tree: {sorted(shipped - expected)}"
    )
    assert f"{IMPORT_NAME}/py.typed" in names
    page = {f"{IMPORT_NAME}/server/ui/{name}" for name in ("status.html", "status.css", "status.js", "favicon.svg")}
    assert page <= set(names), f"the status page's files missing from the wheel: {sorted(page - set(names))}"
    licences = {PurePosixPath(name).name: name for name in names if "/licenses/" in name}
    assert set(licences) == {"LICENSE", "NOTICE"}, f"the wheel's licence files: {sorted(licences)}"
    with zipfile.ZipFile(built) as wheel:
        assert wheel.read(licences["LICENSE"]) == (ROOT / "LICENSE").read_bytes()
        assert b"Apache License" in wheel.read(licences["LICENSE"]) and b"tld" in wheel.read(licences["NOTICE"])
    top_level = {name.split("/", 1)[0] for name in names}
    stray = {entry for entry in top_level if entry != IMPORT_NAME and not entry.endswith(".dist-info")}
    assert not stray, f"the wheel installs names besides {IMPORT_NAME}: {sorted(stray)}"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", IMPORT_NAME, *args],
        capture_output=True,
        text=True,
        timeout=paced(30),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_cli_version_prints_the_installed_version(tmp_path: Path) -> None:
    done = run_cli("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert importlib.metadata.version("frugal-proxy") in done.stdout


def test_cli_help_exits_cleanly(tmp_path: Path) -> None:
    done = run_cli("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()
