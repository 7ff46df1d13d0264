"""Money is exact: prices become integer micro-dollars once, sums are integer sums."""

from __future__ import annotations

from decimal import Decimal

import pytest

from frugal_proxy import money


@pytest.mark.parametrize(
    ("value", "micros"),
    [(Decimal("0.001"), 1_000), (Decimal("0.005"), 5_000), ("0.000001", 1), (0, 0), (2, 2_000_000)],
)
def test_prices_become_micro_dollars_exactly(value: Decimal | int | str, micros: int) -> None:
    assert money.to_micros(value) == micros


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0.001, "not a binary float"),
        (Decimal("-0.001"), "at least $0"),
        (Decimal("0.0000001"), "finer than a micro-dollar"),
        ("NaN", "finite"),
        ("cheap", "not an amount"),
        (True, "not a binary float"),
        # past what an exact receipt can show (28 significant digits): refused, not a crash later
        ("1e22", "at most $1,000,000,000"),
        (Decimal("1e400"), "at most $1,000,000,000"),
    ],
)
def test_amounts_that_cannot_be_held_exactly_are_refused(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):
        money.to_micros(value, "cost_per_call")  # type: ignore[arg-type]


def test_a_thousand_tenths_of_a_cent_make_a_dollar() -> None:
    """The float sum drifts; the micro-dollar sum does not."""
    assert sum([0.001] * 1000) != 1.0
    assert money.usd(sum([money.to_micros(Decimal("0.001"))] * 1000)) == Decimal("1")


def test_amounts_are_shown_with_the_places_they_need() -> None:
    assert money.format_usd(5_000) == "$0.0050"
    assert money.format_usd(0) == "$0.0000"
    assert money.format_usd(1) == "$0.000001"
    assert money.format_usd(12_345_678) == "$12.345678"
    assert money.usd(1_500) == Decimal("0.001500")
