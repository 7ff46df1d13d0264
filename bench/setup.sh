#!/usr/bin/env bash
# Create .bench-venv, a bench-only virtualenv holding FastMCP for the FastMCP-proxy column.
#
# FastMCP pins its own `mcp` version, which may differ from the mcp==2.3.0 in .venv, so it
# lives apart. Re-running is cheap: an existing venv is reused and only upgraded.
#
#   bash bench/setup.sh            # newest fastmcp
#   FASTMCP_SPEC='fastmcp==4.1.6' bash bench/setup.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.bench-venv"
spec="${FASTMCP_SPEC:-fastmcp}"
python="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --upgrade "$spec"

"$venv/bin/python" - <<'PY'
import importlib.metadata as md

print(f"fastmcp {md.version('fastmcp')} with mcp {md.version('mcp')} in .bench-venv")
PY
