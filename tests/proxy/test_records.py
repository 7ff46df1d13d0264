"""The call records: decisions are data, and one renderer turns the trace into the receipt's reason."""

from __future__ import annotations

import msgspec
import pytest

from frugal_proxy.records import Decision, reason


def test_reason_is_the_last_decision_in_words() -> None:
    trace = [
        Decision("admit", "loop_guard", "passed"),
        Decision("govern", "governor", "shaped", "shaped 40000 bytes to 9000", 40000, 9000),
    ]
    assert reason(trace, served=True) == "govern: shaped 40000 bytes to 9000"
    assert reason([Decision("route", "cheapest", "reordered")], served=True) == "route: reordered"


def test_reason_without_decisions_says_what_dispatch_did() -> None:
    assert reason([], served=True) == "served"
    assert reason([], served=False) == "failed"


def test_a_decision_cannot_be_changed_once_written() -> None:
    decision = Decision("admit", "governor", "denied", "repeat of a shaped call denied")
    with pytest.raises(AttributeError):
        decision.verdict = "answered"  # type: ignore[misc]
    assert msgspec.json.decode(msgspec.json.encode(decision), type=Decision) == decision
