"""Operator names without I/O: the one canonical spelling of a name, and the names refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frugal_proxy.identities import InvalidOperator, canonical


@pytest.mark.parametrize(
    "variant",
    [
        "alice",
        "Alice",
        "ALICE",
        "\uff21\uff2c\uff29\uff23\uff25",  # full-width ALICE
        "al\u200bice",  # zero-width space (a format character)
        "\u200dal\u00adi\ufeffce\u2060",  # joiner, soft hyphen, BOM, word joiner
        " alice ",
        "\talice\n",
        "\u3000alice\u00a0",  # ideographic and no-break spaces
        "\U0001d41a\U0001d425\U0001d422\U0001d41c\U0001d41e",  # mathematical bold alice
    ],
)
def test_variants_of_a_name_are_one_operator(variant: str) -> None:
    assert canonical(variant) == "alice"


def test_canonical_names_keep_what_tells_them_apart() -> None:
    assert canonical("Team  Blue\u3000 Ops") == "team blue ops"
    assert canonical("Stra\u00dfe") == canonical("STRASSE") == "strasse"
    assert canonical("\u212bngstr\u00f6m") == canonical("\u00c5ngstro\u0308m")  # Angstrom sign, combining mark
    assert canonical("alice") != canonical("alice2") != canonical("al ice")


@pytest.mark.parametrize("bad", ["", "   ", "\u200b\u200d", "a" * 65, "ali\x00ce", "bob\x1b[31m", "\ue000x"])
def test_unusable_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidOperator):
        canonical(bad)


@given(st.text(max_size=40))
def test_canonical_is_idempotent(name: str) -> None:
    try:
        once = canonical(name)
    except InvalidOperator:
        return
    assert canonical(once) == once


def test_a_huge_name_is_refused_before_any_per_character_work() -> None:
    with pytest.raises(InvalidOperator):
        canonical("a" * 4_000_000)
