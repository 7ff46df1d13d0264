"""The latency book: an EWMA per provider with its sample count."""

from __future__ import annotations

import pytest

from frugal_proxy.state.latency import ALPHA, MemoryLatency


def test_the_average_follows_recent_calls() -> None:
    book = MemoryLatency()
    assert book.estimate("wiki") is None
    book.observe("wiki", 100.0)
    book.observe("wiki", 200.0)
    average, samples = book.estimate("wiki")  # type: ignore[misc]
    assert samples == 2 and average == pytest.approx(100.0 + ALPHA * 100.0)
