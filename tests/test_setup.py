"""scripts/setup.sh: the demo's setup is the venv and the package with the examples extra and
nothing else; the tests' setup adds the test and otel extras, the npm peers, the conformance
suite and the system packages, which it names before any step starts.

The plans are read from `setup.sh --plan` run in a copy of the checkout (and the copy is left as
it was); the demo's setup really runs, through scripts/demo.sh, in a copy whose pyproject keeps
the package's layout but declares no dependencies, so it installs in seconds: a venv, the
strict editable install, the stamp that makes a repeat run a no-op, and no `.deps`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from tests.pace import paced

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^setup: \[(\d+)/(\d+)\] ([^:]+): (.*)$")
DURATION = re.compile(r"\(\d+\.\d s\)$")
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def checkout_copy(into: Path, *, dependencies: bool = True) -> Path:
    """What setup.sh reads of a checkout: its scripts, pyproject.toml and the package folders."""
    for folder in ("proxy", "providers", "policies"):
        shutil.copytree(ROOT / folder, into / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (into / "scripts").mkdir()
    for script in ("setup.sh", "demo.sh"):
        shutil.copy2(ROOT / "scripts" / script, into / "scripts" / script)
    for name in ("README.md", "LICENSE", "NOTICE"):  # the metadata pyproject names
        shutil.copy2(ROOT / name, into / name)
    pyproject = tomlkit.parse((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    if not dependencies:
        project = pyproject["project"]
        project["dependencies"] = tomlkit.array()
        for extra in project["optional-dependencies"]:
            project["optional-dependencies"][extra] = tomlkit.array()
    (into / "pyproject.toml").write_text(tomlkit.dumps(pyproject), encoding="utf-8")
    return into


def run(checkout: Path, *args: str, script: str = "setup.sh", timeout: float = 60) -> list[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHON"] = BASE_PYTHON
    done = subprocess.run(
        ["bash", f"scripts/{script}", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=paced(timeout),
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def steps(lines: list[str]) -> dict[str, list[str]]:
    """Each step's title and its lines' texts, in the order they ran."""
    found: dict[str, list[str]] = {}
    for line in lines:
        match = STEP.match(line)
        if match:
            found.setdefault(match.group(3), []).append(match.group(4))
    return found


def tree(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def test_the_demo_plan_is_the_venv_and_the_examples_extra(tmp_path: Path) -> None:
    checkout = checkout_copy(tmp_path)
    before = tree(checkout)
    lines = run(checkout, "--demo", "--plan")
    plan = steps(lines)
    assert list(plan) == ["venv", "python"]
    assert not [line for line in lines if "Debian" in line or "npm" in line], lines
    assert plan["venv"] == [f"would create .venv with {BASE_PYTHON} ({_version()})"]
    assert plan["python"][0].endswith("pip install -e '.[examples]'")
    assert tree(checkout) == before, "--plan changed the checkout"


def test_the_test_plan_adds_the_extras_node_and_the_system_packages_named_first(tmp_path: Path) -> None:
    checkout = checkout_copy(tmp_path)
    before = tree(checkout)
    lines = run(checkout, "--plan")
    plan = steps(lines)
    assert list(plan) == ["venv", "python", "npm peers", "conformance suite", "system packages"]
    assert plan["python"][0].endswith("pip install -e '.[examples,test,otel]'")
    assert any(".deps/node" in text for text in plan["npm peers"])
    assert any(".deps/conformance" in text or "skipped" in text for text in plan["conformance suite"])
    first_step = next(number for number, line in enumerate(lines) if STEP.match(line))
    named = [line for line in lines[:first_step] if "Debian's" in line]
    assert len(named) == 1 and all(name in named[0] for name in ("chromium", "redis-server", "haproxy")), lines
    assert tree(checkout) == before, "--plan changed the checkout"


@pytest.mark.timeout(300)
def test_the_demo_setup_runs_alone_and_a_repeat_is_a_no_op(tmp_path: Path) -> None:
    checkout = checkout_copy(tmp_path, dependencies=False)
    # demo.sh sets up, then runs examples/demo.py: here a stand-in that says which Python runs it.
    (checkout / "examples").mkdir()
    (checkout / "examples" / "demo.py").write_text("import sys\nprint('demo ran in', sys.prefix)\n")
    first = run(checkout, script="demo.sh", timeout=280)
    assert first[-1] == f"demo ran in {checkout / '.venv'}"
    ran = steps(first)
    assert list(ran) == ["venv", "python"]
    assert ran["venv"][-1].startswith("created") and ran["python"][-1].startswith("installed")
    for line in first:
        if STEP.match(line) and not line.split(": ", 2)[2].startswith(("creating", "installing")):
            assert DURATION.search(line), f"no duration on {line!r}"
    assert re.fullmatch(r"setup: done in \d+\.\d s", first[-2])
    assert not (checkout / ".deps").exists(), "the demo's setup made .deps"
    assert (checkout / ".venv" / "bin" / "frugal-proxy").exists()
    stamp = checkout / ".venv" / ".frugal-setup-stamp"
    assert stamp.read_text().splitlines()[1] == "examples"
    stamped = stamp.stat().st_mtime_ns

    again = steps(run(checkout, "--demo"))
    assert [texts[-1].split(" (")[0] for texts in again.values()] == [
        f".venv ready, {_version()}",
        "frugal-proxy with the extras examples up to date",
    ]
    assert stamp.stat().st_mtime_ns == stamped

    # The tests' setup would add its extras to that venv; a new module makes both reinstall.
    assert steps(run(checkout, "--plan"))["python"][0].endswith("'.[examples,test,otel]'")
    (checkout / "proxy" / "brand_new_module.py").write_text('"""A module the install does not map yet."""\n')
    assert steps(run(checkout, "--demo", "--plan"))["python"][0].startswith("would install")


def _version() -> str:
    return f"Python {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
