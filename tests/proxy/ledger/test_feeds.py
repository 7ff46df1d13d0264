"""What the ledger gives the policies after a restart: spend per provider per day, billed calls,
and the latencies of successful calls."""

from __future__ import annotations

import datetime
from pathlib import Path

from frugal_proxy.ledger import feeds
from frugal_proxy.ledger.line import encode
from tests.ledger_lines import usage_line
from tests.ledger_month import write_month

JULY_3 = datetime.datetime(2026, 7, 3, 12, tzinfo=datetime.UTC).timestamp()


def test_spend_on_a_day_per_provider(tmp_path: Path) -> None:
    write_month(tmp_path)
    assert feeds.spend_on("2026-07-01", tmp_path) == {"search/serper": 1_000}
    # keyed as the daily budgets are, per capability table: the extraction that fell forward to
    # a render bills firecrawl under extract, browserless under browse; a priced plain tool under tool
    day2 = {"extract/firecrawl": 1_000, "browse/browserless": 2_000, "tool/notes": 2_500, "search/serper": 1_000}
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
    assert feeds.spend_on("2026-07-02", tmp_path) == {"search/brave": 10_000}


def test_one_name_in_two_capability_tables_keeps_two_counters(tmp_path: Path) -> None:
    """A provider name configured for search and for extract (two upstream tools' tables) spends
    against two daily budgets: what it billed as one is not counted against the other."""
    (tmp_path / "2026-07.jsonl").write_bytes(
        encode(usage_line(ts="2026-07-02T10:00:00.000Z", billed={"mine": 0.002}))
        + encode(usage_line(ts="2026-07-02T10:00:01.000Z", capability="extract", billed={"mine": 0.003}))
    )
    assert feeds.spend_on("2026-07-02", tmp_path) == {"search/mine": 2_000, "extract/mine": 3_000}


def test_one_name_billed_in_two_tables_by_one_call_counts_in_each(tmp_path: Path) -> None:
    """An extraction by `mine` that fell forward to a render by `mine` (configured in both the
    extract and browse tables) bills both tables in one line: each budget gets its part, and the
    free quota two calls."""
    both = usage_line(
        ts="2026-07-02T10:00:00.000Z",
        tool="frugal__execute",
        capability="browse",
        billed={"mine": 0.005},
        billed_under={"mine": {"extract": 0.002, "browse": 0.003}},
    )
    (tmp_path / "2026-07.jsonl").write_bytes(encode(both))
    assert feeds.spend_on("2026-07-02", tmp_path) == {"extract/mine": 2_000, "browse/mine": 3_000}
    assert feeds.billed_calls("2026-07", tmp_path) == {"mine": 2}


def test_before_leaves_out_the_lines_written_since(tmp_path: Path) -> None:
    """A process that started at 10:00:00.500 counts what it served itself live: the rebuild reads
    only the lines written before it, in every feed."""
    stamps = [
        "2026-07-02T10:00:00.000Z",
        "2026-07-02T10:00:00.499Z",
        "2026-07-02T10:00:00.500Z",
        "2026-07-02T11:00:00.000Z",
    ]
    (tmp_path / "2026-07.jsonl").write_bytes(
        b"".join(
            encode(usage_line(ts=stamp, billed={"serper": 0.001}, served_ms={"serper": float(n)}))
            for n, stamp in enumerate(stamps)
        )
    )
    cut = "2026-07-02T10:00:00.500Z"
    assert feeds.spend_on("2026-07-02", tmp_path, before=cut) == {"search/serper": 2_000}
    assert feeds.spend_on("2026-07-02", tmp_path) == {"search/serper": 4_000}
    assert feeds.billed_calls("2026-07", tmp_path, before=cut) == {"serper": 2}
    assert feeds.served_latencies(["serper"], now=JULY_3, directory=tmp_path, before=cut) == {"serper": [0.0, 1.0]}


def test_billed_calls_count_free_quota_answers(tmp_path: Path) -> None:
    write_month(tmp_path)
    assert feeds.billed_calls("2026-07", tmp_path) == {"serper": 2, "firecrawl": 1, "browserless": 1, "notes": 1}
    (tmp_path / "2026-08.jsonl").write_bytes(encode(usage_line(ts="2026-08-01T00:00:00.000Z", free_quota=["serper"])))
    assert feeds.billed_calls("2026-08", tmp_path) == {"serper": 1}  # billed $0 on its quota: a unit used


def test_latencies_of_successful_calls_oldest_first(tmp_path: Path) -> None:
    lines = [usage_line(served_ms={"serper": float(n)}) for n in range(30)]
    lines += [usage_line(served_ms={"brave": 500.0})]
    (tmp_path / "2026-06.jsonl").write_bytes(encode(usage_line(ts="2026-06-30T00:00:00.000Z", served_ms={"jina": 9.0})))
    (tmp_path / "2026-07.jsonl").write_bytes(b"".join(encode(line) for line in lines))
    found = feeds.served_latencies(samples=5, now=JULY_3, directory=tmp_path)
    assert found == {"serper": [25.0, 26.0, 27.0, 28.0, 29.0], "brave": [500.0], "jina": [9.0]}
    wanted = feeds.served_latencies(["serper"], samples=3, now=JULY_3, directory=tmp_path)
    assert wanted == {"serper": [27.0, 28.0, 29.0]}


def test_every_replicas_file_counts(tmp_path: Path) -> None:
    """On a usage folder the replicas share, the rebuild reads each replica's file and the month's
    one file from before replica ids; the latest latencies are the fleet's, merged by time."""
    (tmp_path / "2026-07.jsonl").write_bytes(
        encode(usage_line(ts="2026-07-02T09:00:00.000Z", billed={"serper": 0.001}, served_ms={"serper": 1.0}))
    )
    (tmp_path / "2026-07.replica-1.jsonl").write_bytes(
        encode(usage_line(ts="2026-07-02T10:00:00.000Z", billed={"serper": 0.003}, served_ms={"serper": 3.0}))
        + encode(usage_line(ts="2026-07-02T12:00:00.000Z", free_quota=["serper"], served_ms={"serper": 5.0}))
    )
    (tmp_path / "2026-07.replica-2.jsonl").write_bytes(
        encode(usage_line(ts="2026-07-02T11:00:00.000Z", billed={"serper": 0.003}, served_ms={"serper": 4.0}))
        + encode(usage_line(ts="2026-07-02T11:00:00.000Z", billed={"serper": 0.003}, served_ms={"serper": 2.0}))
    )
    assert feeds.spend_on("2026-07-02", tmp_path) == {"search/serper": 10_000}
    assert feeds.billed_calls("2026-07", tmp_path) == {"serper": 5}
    latest = feeds.served_latencies(["serper"], samples=3, now=JULY_3, directory=tmp_path)
    assert latest == {"serper": [4.0, 2.0, 5.0]}  # 11:00 twice in its file's order, then 12:00
