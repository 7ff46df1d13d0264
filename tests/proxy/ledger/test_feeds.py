"""What the ledger gives the policies after a restart: spend per provider per day, billed calls,
and the latencies of successful calls."""

from __future__ import annotations

import datetime
from pathlib import Path

from frugal_proxy.ledger import feeds
from frugal_proxy.ledger.line import encode
from frugal_proxy.state.latency import MemoryLatency
from frugal_proxy.state.usage import MemoryUsage
from tests.ledger_lines import usage_line
from tests.ledger_month import write_month

JULY_3 = datetime.datetime(2026, 7, 3, 12, tzinfo=datetime.UTC).timestamp()


def test_spend_on_a_day_per_provider(tmp_path: Path) -> None:
    write_month(tmp_path)
    assert feeds.spend_on("2026-07-01", tmp_path) == {"serper": 1_000}
    day2 = {"firecrawl": 1_000, "browserless": 2_000, "notes": 2_500, "serper": 1_000}
    assert feeds.spend_on("2026-07-02", tmp_path) == day2
    assert feeds.spend_on("2026-07-03", tmp_path) == {}
    assert feeds.spend_on("2026-08-01", tmp_path) == {}  # no file for that month


def test_spend_on_a_day_reads_only_the_tail(tmp_path: Path) -> None:
    older = b"".join(encode(usage_line(ts="2026-07-01T00:00:00.000Z", billed={"serper": 0.001})) for _ in range(100))
    (tmp_path / "2026-07.jsonl").write_bytes(
        b"not json at all\n" * 10  # never reached: the read stops at the day before
        + older
        + encode(usage_line(ts="2026-07-02T00:00:01.000Z", billed={"brave": 0.005}))
        + encode(usage_line(ts="2026-07-01T23:59:59.500Z", billed={"serper": 0.001}))  # written late
        + encode(usage_line(ts="2026-07-02T10:00:00.000Z", billed={"brave": 0.005}))
    )
    assert feeds.spend_on("2026-07-02", tmp_path) == {"brave": 10_000}


def test_spend_by_day_and_billed_calls(tmp_path: Path) -> None:
    write_month(tmp_path)
    assert feeds.spend_by_day("2026-07", tmp_path) == {
        "2026-07-01": {"serper": 1_000},
        "2026-07-02": {"firecrawl": 1_000, "browserless": 2_000, "notes": 2_500, "serper": 1_000},
    }
    assert feeds.billed_calls("2026-07", tmp_path) == {"serper": 2, "firecrawl": 1, "browserless": 1, "notes": 1}
    counter = MemoryUsage(lambda: JULY_3)
    feeds.feed_usage(counter, now=JULY_3, directory=tmp_path)
    assert counter.calls_this_month("serper") == 2 and counter.calls_this_month("marginalia") == 0


def test_latencies_of_successful_calls_oldest_first(tmp_path: Path) -> None:
    lines = [usage_line(served_ms={"serper": float(n)}) for n in range(30)]
    lines += [usage_line(served_ms={"brave": 500.0})]
    (tmp_path / "2026-06.jsonl").write_bytes(encode(usage_line(ts="2026-06-30T00:00:00.000Z", served_ms={"jina": 9.0})))
    (tmp_path / "2026-07.jsonl").write_bytes(b"".join(encode(line) for line in lines))
    found = feeds.served_latencies(samples=5, now=JULY_3, directory=tmp_path)
    assert found == {"serper": [25.0, 26.0, 27.0, 28.0, 29.0], "brave": [500.0], "jina": [9.0]}
    wanted = feeds.served_latencies(["serper"], samples=3, now=JULY_3, directory=tmp_path)
    assert wanted == {"serper": [27.0, 28.0, 29.0]}


def test_feed_latency_replays_into_the_book(tmp_path: Path) -> None:
    write_month(tmp_path)
    book = MemoryLatency()
    feeds.feed_latency(book, now=JULY_3, directory=tmp_path)
    assert book.estimate("browserless") == (2100.0, 1)
    assert book.estimate("marginalia") == (118.25, 1) and book.estimate("serper") == (250.0, 1)
