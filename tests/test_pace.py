"""tests/pace.py: the slowdown factor, the paced waits, and the per-test timeout it scales."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import anyio
import pytest
from mcp.client import session as sdk_session

from tests import conftest, pace

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("given", ["0.5", "0", "-2", "nan", "fast", ""])
def test_a_factor_below_one_or_not_a_number_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="FRUGAL_TEST_PACE"):
        pace.parse(given)


def test_a_given_factor_is_taken_as_it_is() -> None:
    assert pace.parse("1") == 1.0 and pace.parse("2.5") == 2.5


@pytest.mark.parametrize(("seconds", "factor"), [(0.1, 1.0), (1.6, 2.0), (100.0, pace.MAX_FACTOR)])
def test_the_measured_factor_is_the_start_up_against_the_reference_within_its_bounds(
    monkeypatch: pytest.MonkeyPatch, seconds: float, factor: float
) -> None:
    monkeypatch.setattr(pace, "REFERENCE_SECONDS", 0.8)
    monkeypatch.setattr(pace, "start_up_seconds", lambda: seconds)
    assert pace.measure() == pytest.approx(factor)


def test_a_real_start_up_measures_within_the_bounds() -> None:
    assert 1.0 <= pace.measure(runs=1) <= pace.MAX_FACTOR


def test_the_factor_of_a_process_is_measured_once(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[int] = []

    def measure(runs: int = pace.RUNS) -> float:
        measured.append(runs)
        return 2.5

    monkeypatch.delenv(pace.ENVIRONMENT, raising=False)
    monkeypatch.setattr(pace, "measure", measure)
    factor = functools.cache(
        pace.factor.__wrapped__
    )  # the same function, its own cache (this process keeps its factor)
    assert factor() == 2.5 and factor() == 2.5
    assert measured == [pace.RUNS]


def test_paced_waits_scale_by_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace, "factor", lambda: 3.0)
    assert pace.paced(2) == 6.0
    assert pace.duration(0.2) == "600ms"


async def test_a_deadline_is_the_paced_time_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pace, "factor", lambda: 3.0)
    began = anyio.current_time()
    with pace.deadline(10) as scope:
        assert scope.deadline == pytest.approx(began + 30, abs=1)


class _Item:
    """What the conftest hook reads of a collected test: its closest `timeout` marker."""

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [mark.mark for mark in marks]

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, marker: pytest.MarkDecorator, append: bool = True) -> None:
        self.marks.insert(len(self.marks) if append else 0, marker.mark)


def _scaled(monkeypatch: pytest.MonkeyPatch, *items: _Item, ini: float | None = 60.0) -> list[float | None]:
    monkeypatch.setattr(pace, "factor", lambda: 3.0)
    config = SimpleNamespace(_env_timeout=ini)
    conftest.pytest_collection_modifyitems(config, list(items))  # type: ignore[arg-type]
    return [_timeout(item.get_closest_marker("timeout")) for item in items]


def _timeout(marker: pytest.Mark | None) -> float | None:
    if marker is None:
        return None
    seconds: float | None = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
    return seconds


def test_a_tests_own_timeout_and_the_ini_timeout_are_scaled_by_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _scaled(monkeypatch, _Item(pytest.mark.timeout(7)), _Item(pytest.mark.timeout(timeout=5)), _Item()) == [
        21.0,
        15.0,
        180.0,
    ]


def test_no_timeout_stays_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _scaled(monkeypatch, _Item(pytest.mark.timeout(0)), _Item(), ini=None) == [0, None]


@pytest.mark.timeout(7)
def test_this_tests_own_timeout_was_scaled(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.kwargs["timeout"] == pytest.approx(7 * pace.factor())


def test_the_sdk_clients_discover_probe_is_paced() -> None:
    assert sdk_session.DISCOVER_TIMEOUT_SECONDS == pytest.approx(10.0 * pace.factor())
