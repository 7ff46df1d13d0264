#!/usr/bin/env bash
# Create .bench-venv, a bench-only virtualenv holding FastMCP for the FastMCP-proxy column, and
# .bench-venv/mcp-proxy, holding mcp-proxy for the HTTP bench's peer column.
#
# FastMCP pins its own `mcp` version, which may differ from the mcp==2.3.0 in .venv, so it
# lives apart. mcp-proxy 0.13.0 requires mcp>=1.27.1,<2, which FastMCP's mcp 2.x excludes, so it
# gets a virtualenv of its own inside .bench-venv. Re-running is cheap: an existing venv is reused
# and only upgraded.
#
#   bash bench/setup.sh            # newest fastmcp, mcp-proxy 0.13.0
#   FASTMCP_SPEC='fastmcp==4.1.6' MCP_PROXY_SPEC='mcp-proxy==0.12.0' bash bench/setup.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.bench-venv"
spec="${FASTMCP_SPEC:-fastmcp}"
mcp_proxy_spec="${MCP_PROXY_SPEC:-mcp-proxy==0.13.0}"
python="${PYTHON:-python3}"

# venv_with DIR SPEC PACKAGE: make the virtualenv DIR (or reuse it), install SPEC, say the versions.
venv_with() {
    if [[ ! -x "$1/bin/python" ]]; then
        "$python" -m venv "$1"
    fi
    "$1/bin/python" -m pip install --quiet --upgrade pip
    "$1/bin/python" -m pip install --quiet --upgrade "$2"
    "$1/bin/python" - "$3" "${1#"$root"/}" <<'PY'
import importlib.metadata as md
import sys

name, where = sys.argv[1:]
print(f"{name} {md.version(name)} with mcp {md.version('mcp')} in {where}")
PY
}

venv_with "$venv" "$spec" fastmcp
venv_with "$venv/mcp-proxy" "$mcp_proxy_spec" mcp-proxy
