#!/usr/bin/env bash
# The offline demo, no keys: the routed tools (a search with failover, a page read and its cut,
# an intent, the costs) through `frugal-proxy serve --config examples/demo/frugal.toml`, then the
# notes server through frugal-proxy in both protocol eras. It sets up only what the demo needs
# (scripts/setup.sh --demo: the venv and the package with the examples extra). Arguments go to examples/demo.py
# (e.g. --direct, --verbose).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh --demo
exec .venv/bin/python examples/demo.py "$@"
