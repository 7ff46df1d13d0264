"""Monthly call counts for free quotas roll over at the start of a UTC month."""

from __future__ import annotations

import datetime

from frugal_proxy.state.usage import MemoryUsage, utc_month


def test_counts_roll_over_at_the_utc_month() -> None:
    now = [datetime.datetime(2026, 7, 31, 23, 59, 59, tzinfo=datetime.UTC).timestamp()]
    usage = MemoryUsage(lambda: now[0])
    usage.count("serper")
    usage.count("serper")
    assert usage.calls_this_month("serper") == 2 and usage.calls_this_month("brave") == 0
    now[0] += 1
    assert utc_month(now[0]) == "2026-08"
    assert usage.calls_this_month("serper") == 0
