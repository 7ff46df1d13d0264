"""tests/pace.py: the slowdown factor, the paced waits, and the per-test timeout it scales."""

from __future__ import annotations

import anyio
import pytest
from mcp.client import session as sdk_session

from tests import pace

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("given", ["0.5", "0", "-2", "nan", "fast", ""])
def test_a_factor_below_one_or_not_a_number_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="FRUGAL_TEST_PACE"):
        pace.parse(given)


def test_a_given_factor_is_taken_as_it_is() -> None:
    assert pace.parse("1") == 1.0 and pace.parse("2.5") == 2.5


def test_the_measured_factor_is_within_its_bounds() -> None:
    assert 1.0 <= pace.measure(runs=1) <= pace.MAX_FACTOR


def test_the_factor_of_this_process_is_measured_once() -> None:
    first = pace.factor()
    assert pace.factor() == first and pace.factor.cache_info().currsize == 1
    assert 1.0 <= first <= pace.MAX_FACTOR


def test_paced_waits_scale_by_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace, "factor", lambda: 3.0)
    assert pace.paced(2) == 6.0
    assert pace.duration(0.2) == "600ms"


async def test_a_deadline_is_the_paced_time_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace, "factor", lambda: 3.0)
    began = anyio.current_time()
    with pace.deadline(10) as scope:
        assert scope.deadline == pytest.approx(began + 30, abs=1)


@pytest.mark.timeout(7)
def test_the_per_test_timeout_is_scaled_by_the_factor(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.kwargs["timeout"] == pytest.approx(7 * pace.factor())


def test_the_ini_timeout_is_scaled_too(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    ini = float(request.config.getini("timeout"))  # pyproject's 60 s
    assert marker is not None and marker.kwargs["timeout"] == pytest.approx(ini * pace.factor())


def test_the_sdk_clients_discover_probe_is_paced() -> None:
    assert sdk_session.DISCOVER_TIMEOUT_SECONDS == pytest.approx(10.0 * pace.factor())
