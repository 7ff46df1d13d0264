#!/usr/bin/env bash
# The test command: prepare the checkout (scripts/setup.sh), then run pytest with any
# arguments given, e.g. `bash scripts/test.sh tests/proxy -x`. pytest's exit status is
# passed through unchanged, so "no tests collected" (5) stays a failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
