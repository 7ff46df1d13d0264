#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance 0.1.16 and
# 0.2.0-alpha.12, Node 22) against the fixture server directly and through frugal-proxy --http,
# with and without --stateless: prepares the checkout (scripts/setup.sh installs Node 22 and the
# suite into .deps/conformance), then runs tests/e2e/test_conformance.py and prints the counts.
# Arguments go to pytest, e.g. `bash scripts/conformance.sh -k 2026-07-28`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
exec .venv/bin/python -m pytest tests/e2e/test_conformance.py -s -q "$@"
