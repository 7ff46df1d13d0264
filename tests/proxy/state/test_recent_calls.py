"""The status page's ring of recent calls: bounded, newest first, a provider's p50 from its
answered attempts only, and its failures counted over the last 15 minutes of a fake clock."""

from __future__ import annotations

from frugal_proxy.state.recent_calls import MAX_SAMPLES, AttemptRecord, CallRecord, RecentCalls
from tests.fake_clock import Clock


def call(clock: Clock, tool: str, *attempts: AttemptRecord) -> CallRecord:
    return CallRecord(clock(), tool, "search", None, "ok", 0, 1.0, 0, attempts)


def test_the_ring_keeps_the_last_calls_newest_first() -> None:
    clock = Clock()
    book = RecentCalls(clock, max_calls=3)
    for number in range(5):
        book.add(call(clock, f"tool{number}"))
    assert [record.tool for record in book.recent()] == ["tool4", "tool3", "tool2"]
    assert [record.tool for record in book.recent(1)] == ["tool4"]
    assert book.total == 5
    assert [record.number for record in book.recent()] == [5, 4, 3]  # each call's stable id


def test_p50_reads_answered_attempts_and_keeps_only_the_last_samples() -> None:
    clock = Clock()
    book = RecentCalls(clock)
    assert book.p50_ms("wiki") is None
    for latency in (10.0, 30.0, 20.0):
        book.add(call(clock, "s", AttemptRecord("wiki", "ok", latency)))
    book.add(call(clock, "s", AttemptRecord("wiki", "transient", 9000.0)))  # a failure is no sample
    assert book.p50_ms("wiki") == 20.0
    book.add(call(clock, "s", AttemptRecord("wiki", "empty", 40.0), AttemptRecord("wiki", "empty", 50.0)))
    assert book.p50_ms("wiki") == 30.0  # an empty answer is an answer: its latency is a sample
    for _ in range(MAX_SAMPLES):
        book.add(call(clock, "s", AttemptRecord("wiki", "ok", 100.0)))
    assert book.p50_ms("wiki") == 100.0  # the first three fell out of the window


def test_errors_count_the_last_fifteen_minutes_of_failures() -> None:
    clock = Clock()
    book = RecentCalls(clock)
    book.add(call(clock, "s", AttemptRecord("busy", "rate_limited", 5.0), AttemptRecord("tavily", "ok", 50.0)))
    clock.now += 600
    book.add(call(clock, "s", AttemptRecord("busy", "transient", 5.0), AttemptRecord("busy", "empty", 5.0)))
    assert book.errors("busy") == 2  # an empty answer is an answer, not an error
    assert book.errors("tavily") == 0
    clock.now += 301  # the first failure is now 15 min 1 s old
    assert book.errors("busy") == 1
    clock.now += 900
    assert book.errors("busy") == 0
