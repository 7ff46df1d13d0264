"""Money, exactly: every price and every spend is an integer number of micro-dollars.

A float cannot hold $0.001 exactly, and a sum of them drifts; a cap, a ceiling or a receipt that
is off by a call is a bug. Prices arrive as decimals (the config file is read with
`parse_float=Decimal`) and are turned into micro-dollars once; every sum is an integer sum; a
figure becomes a decimal again only where it is shown (`usd`, `format_usd`).

    MICROS_PER_USD   1,000,000
    to_micros        a price or a spend from its decimal form; ValueError below a micro-dollar
                     or above MAX_USD
    usd              micro-dollars as an exact Decimal (what JSON answers carry as a number)
    format_usd       micro-dollars as people read them: `$0.0050`
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

MICROS_PER_USD = 1_000_000
# More than any price or budget means, and far below where an exact figure (28 significant
# digits, 6 of them after the point) can no longer be shown.
MAX_USD = 1_000_000_000
_MICRO = Decimal("0.000001")


def to_micros(value: Decimal | int | str, where: str = "a price") -> int:
    """Micro-dollars of a non-negative amount of US dollars given as a decimal (an int counts as
    whole dollars; a float is refused: it has already lost the exact value)."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"{where}: give the amount as a decimal, not a binary float")
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise ValueError(f"{where}: {value!r} is not an amount of US dollars") from None
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{where}: must be a finite amount of at least $0")
    if amount > MAX_USD:
        raise ValueError(f"{where}: at most ${MAX_USD:,}; {value} USD is not a price or a budget")
    micros = amount * MICROS_PER_USD
    if micros != micros.to_integral_value():
        raise ValueError(f"{where}: {value} USD is finer than a micro-dollar ($0.000001)")
    return int(micros)


def usd(micros: int) -> Decimal:
    """The exact dollar amount of a number of micro-dollars."""
    return (Decimal(micros) / MICROS_PER_USD).quantize(_MICRO)


def format_usd(micros: int, places: int = 4) -> str:
    """`$0.0050`: at least `places` decimals, more when the amount needs them to stay exact."""
    amount = usd(micros).normalize()
    exponent = amount.as_tuple().exponent
    shown = max(places, -exponent if isinstance(exponent, int) else places)
    return f"${usd(micros):.{shown}f}"
