"""The month's receipt, checked against figures worked out by hand (tests/ledger_month.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from frugal_proxy.ledger.line import encode
from frugal_proxy.ledger.tally import Tallied, tally, tally_month
from tests.ledger_lines import usage_line
from tests.ledger_month import write_month


def test_the_months_figures(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_month(tmp_path)
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.ledger"):
        month = tally_month("2026-07", tmp_path)
    assert (month.calls, month.paid, month.rack, month.saved) == (9, 7_500, 19_500, 12_000)
    assert month.saved_percent == pytest.approx(61.538, abs=0.001)
    assert month.tokens_kept_out == 8_900
    assert month.failed == 3  # rate-limited, the paid empty answer, the refusal
    assert month.skipped_lines == 1 and "skipped 1 unreadable line" in caplog.text
    assert [(d.day, d.calls, d.paid, d.rack, d.saved) for d in month.days] == [
        ("2026-07-01", 3, 1_000, 15_000, 14_000),
        ("2026-07-02", 6, 6_500, 4_500, -2_000),
    ]
    assert [(r.tool, r.provider, r.outcome, r.calls, r.paid) for r in month.rows] == [
        ("add", "notes", "ok", 1, 2_500),
        ("files__read", "files", "ok", 1, 0),
        ("frugal__execute", "browserless", "ok", 1, 3_000),
        ("frugal__extract", None, "denied", 1, 0),
        ("frugal__search", "marginalia", "ok", 1, 0),
        ("frugal__search", "serper", "ok", 1, 1_000),
        ("frugal__search", None, "cached", 1, 0),
        ("frugal__search", "serper", "empty", 1, 1_000),
        ("frugal__search", "wikipedia", "rate_limited", 1, 0),
    ]


def test_a_month_with_no_file_has_no_calls(tmp_path: Path) -> None:
    month = tally_month("2026-06", tmp_path)
    assert (month.calls, month.paid, month.rack, month.rows, month.days) == (0, 0, 0, [], [])
    assert month.saved_percent is None


def test_calls_of_one_provider_add_up_on_one_row() -> None:
    lines = [Tallied(ts="2026-07-03T00:00:00.000Z", tool="frugal__search", provider="serper", total_cost_usd=0.001)] * 3
    month = tally("2026-07", [lines[:1], lines[1:]])
    assert [(r.provider, r.calls, r.paid) for r in month.rows] == [("serper", 3, 3_000)]
    assert month.rack == 0  # no rack rate in these lines: nothing claimed as saved


def test_a_line_of_a_later_version_is_read_for_the_fields_it_shares(tmp_path: Path) -> None:
    path = tmp_path / "2026-07.jsonl"
    path.write_bytes(b'{"ts":"2026-07-05T00:00:00.000Z","tool":"t","outcome":"ok","new_field":[1,2],"rack_usd":0.5}\n')
    month = tally_month("2026-07", tmp_path)
    assert (month.calls, month.rack) == (1, 500_000)


def test_a_fleets_month_is_every_replicas_file_and_the_one_file_of_before(tmp_path: Path) -> None:
    """Three replicas' files and a month's one file from before replica ids: one receipt of all
    of them, which says whose files it read."""
    write_month(tmp_path)  # 9 calls in 2026-07.jsonl, a torn last line
    for n, replica in enumerate(("replica-1", "replica-2", "replica-3"), 1):
        line = encode(usage_line(ts=f"2026-07-0{n}T10:00:00.000Z", provider="serper", total_cost_usd=0.003))
        (tmp_path / f"2026-07.{replica}.jsonl").write_bytes(line * n)
    month = tally_month("2026-07", tmp_path)
    assert month.replicas == ["", "replica-1", "replica-2", "replica-3"]
    assert month.calls == 9 + 1 + 2 + 3 and month.paid == 7_500 + 6 * 3_000
    assert month.skipped_lines == 1 and month.folder == tmp_path
