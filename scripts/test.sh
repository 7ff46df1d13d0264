#!/usr/bin/env bash
# The test command: prepare the checkout (scripts/setup.sh), then run pytest with any
# arguments given, e.g. `bash scripts/test.sh tests/proxy -x`. pytest's exit status is
# passed through unchanged, so "no tests collected" (5) stays a failure.
#
# The tests run in pytest-xdist worker processes, one more than the machine has cores: most
# end-to-end tests wait on the processes they start (servers importing the SDK, the proxy,
# Node), so a spare worker fills those waits. `--dist loadfile` keeps each test file in one
# worker, in its order, so module-scoped fixtures (the conformance baselines, the Docker
# stand-in image, the shared proxies) are made once, as in a single process.
# FRUGAL_TEST_WORKERS=N sets the count; `-n 0` (after the other arguments) runs everything in
# this process, which --pdb and reading `-s` output need.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
cores="$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
workers="${FRUGAL_TEST_WORKERS:-$((cores + 1))}"
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile "$@"
