#!/usr/bin/env bash
# A short offline demo: an MCP client talks to examples/servers/notes_server.py through
# frugal-proxy in both protocol eras. Arguments go to examples/demo.py (e.g. --direct).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
exec .venv/bin/python examples/demo.py "$@"
