"""The layer rule is executable: `lint-imports` checks the contracts in pyproject.toml
([tool.importlinter]), so a wrong import fails the test run, not a later review."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.pace import paced

ROOT = Path(__file__).resolve().parents[1]


def lint_imports() -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=paced(50), check=False)


def test_every_import_contract_is_kept() -> None:
    done = lint_imports()
    assert done.returncode == 0, f"an import breaks the layer rule:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in done.stdout
