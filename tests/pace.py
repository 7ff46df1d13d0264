"""The machine's pace, and the deadlines the tests wait under.

Every wait in a test is a deadline on an event (a reply, a line on stderr, a port answering):
it passes as soon as the event happens and only its failure costs the whole wait. A loaded
machine (two cores, other work beside the suite) takes several times the idle time for the
same start-up, so each deadline is scaled by one slowdown factor, measured once per process:

    factor()            the slowdown, >= 1: a fixed Python start-up (`python -c "import mcp"`
                        from the venv, the median of three) against REFERENCE_SECONDS, what it
                        takes on the idle 2-core machine the suite's deadlines were set on;
                        FRUGAL_TEST_PACE=F sets it instead (F >= 1)
    paced(seconds)      `seconds` on this machine: seconds * factor()
    deadline(seconds)   anyio.fail_after(paced(seconds)), for the waits in async tests
    duration(seconds)   paced(seconds) as a config duration ("650ms"), for a product timeout a
                        test's config sets and a loaded machine would trip

A deadline only ever gets longer than the figure written in the test, never shorter, and no
test checks less because of it: where a test asserts that something happens *before* another
thing (a reply before a slow call would end), the slow thing is made slower rather than the
bound looser. tests/conftest.py scales pytest-timeout's per-test timeout by the same factor.
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import time
from contextlib import AbstractContextManager

import anyio

REFERENCE_SECONDS = 0.8  # `python -c "import mcp"` on the idle 2-core machine (measured 0.73-0.82 s)
RUNS = 3  # start-ups measured; their median is the pace (one odd run does not count)
MAX_FACTOR = 8.0  # beyond this a deadline is no longer a deadline: the machine is not fit to test on
ENVIRONMENT = "FRUGAL_TEST_PACE"


def parse(value: str) -> float:
    """FRUGAL_TEST_PACE's value as a factor; a usable message where it is not one (>= 1)."""
    try:
        factor = float(value)
    except ValueError:
        factor = float("nan")
    if not factor >= 1.0:  # NaN fails this too
        raise ValueError(f"{ENVIRONMENT}={value!r}: give a slowdown factor of 1 or more (1.5 waits 1.5 times as long)")
    return factor


def start_up_seconds() -> float:
    """The wall-clock time of one fixed Python start-up: the venv's interpreter importing the SDK."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp"], check=True, timeout=120)
    return time.perf_counter() - started


def measure(runs: int = RUNS) -> float:
    """The slowdown factor this machine shows now: the median start-up against the reference,
    never below 1 and never above MAX_FACTOR."""
    median = statistics.median(start_up_seconds() for _ in range(runs))
    return min(max(median / REFERENCE_SECONDS, 1.0), MAX_FACTOR)


@functools.cache
def factor() -> float:
    """The slowdown factor of this process's tests: FRUGAL_TEST_PACE, or measured once."""
    given = os.environ.get(ENVIRONMENT)
    return parse(given) if given else measure()


def paced(seconds: float) -> float:
    """`seconds`, as long as it takes on this machine now."""
    return seconds * factor()


def deadline(seconds: float) -> AbstractContextManager[anyio.CancelScope]:
    """`anyio.fail_after` for a wait written as `seconds` on an idle machine, scaled by the pace."""
    return anyio.fail_after(paced(seconds))


def duration(seconds: float) -> str:
    """paced(seconds) as a config duration in whole milliseconds ("650ms")."""
    return f"{round(paced(seconds) * 1000)}ms"
