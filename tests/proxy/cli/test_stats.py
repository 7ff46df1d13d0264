"""`frugal-proxy stats`: the month's receipt laid out as the issue draws it, the same figures as
JSON, an empty month saying so. The fixture month and its figures are tests/ledger_month.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from frugal_proxy.cli.stats import as_json, render, stats_command
from frugal_proxy.ledger.line import encode
from frugal_proxy.ledger.tally import tally_month
from tests.ledger_lines import usage_line
from tests.ledger_month import write_month

RECEIPT = """\
frugal receipt · July 2026 (UTC)
tool         provider            calls        paid
add          notes                   1     $0.0025
files__read  files                   1     $0.0000
execute      browserless             1     $0.0030
extract      —                       1     $0.0000  refused
search       marginalia              1     $0.0000
search       serper                  1     $0.0010
search       (cache)                 1     $0.0000  cached
search       serper                  1     $0.0010  no results
search       wikipedia               1     $0.0000  failed: rate_limited
total                                9     $0.0075
same calls at premium rack rate*           $0.0195
you paid                                   $0.0075
you saved                                  $0.0120   (62%)
context kept out of the model                8,900 tokens (cut by the governor, fetchable while spilled)
* rack rate = list price of each capability's premium provider, snapshotted at call time.
  failed calls excluded.
read 1 ledger file: 2026-07.jsonl (written before replica ids)
1 unreadable ledger line(s) skipped

per day (UTC)  █ paid  ░ saved
07-01  ██░░░░░░░░░░░░░░░░░░░░░░░░░░░░░░      3 calls  paid $0.0010  saved $0.0140
07-02  ██████████████                        6 calls  paid $0.0065  saved -$0.0020
"""


@pytest.fixture
def month(frugal_home: Path) -> Path:
    return write_month(frugal_home / "usage")


def test_the_receipt_as_the_terminal_shows_it(month: Path) -> None:
    assert render(tally_month("2026-07")).plain == RECEIPT


def test_the_command_prints_it(month: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert stats_command(["--month", "2026-07"]) == 0
    out, err = capsys.readouterr()
    assert out == RECEIPT + "\n"
    assert "skipped 1 unreadable line(s)" in err  # the torn last line: a warning, never fatal


def test_json_has_the_same_figures(month: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert stats_command(["--month", "2026-07", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures == json.loads(json.dumps(as_json(tally_month("2026-07")), default=float))
    assert (figures["calls"], figures["failed_calls"], figures["tokens_kept_out"]) == (9, 3, 8_900)
    assert (figures["paid_usd"], figures["rack_usd"], figures["saved_usd"]) == (0.0075, 0.0195, 0.012)
    assert figures["saved_percent"] == 61.54 and figures["skipped_lines"] == 1
    assert figures["days"][1] == {
        "day": "2026-07-02",
        "calls": 6,
        "paid_usd": 0.0065,
        "rack_usd": 0.0045,
        "saved_usd": -0.002,
    }
    assert figures["rows"][3] == {
        "tool": "frugal__extract",
        "provider": None,
        "outcome": "denied",
        "credited": False,
        "calls": 1,
        "paid_usd": 0,
        "maybe_billed_usd": 0,
    }
    assert figures["maybe_billed_usd"] == 0


def test_an_empty_month_says_so(frugal_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert stats_command(["--month", "2026-06"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("frugal receipt · June 2026 (UTC)\nno calls recorded in June 2026 (nothing in ")
    assert stats_command(["--month", "2026-06", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["calls"], figures["rows"], figures["days"], figures["saved_percent"]) == (0, [], [], None)


def test_an_empty_month_says_when_nothing_is_recorded(frugal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRUGAL_STATS", "off")
    assert "FRUGAL_STATS=off: this machine records no calls" in render(tally_month("2026-06")).plain


def test_a_month_is_yyyy_mm(frugal_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        stats_command(["--month", "July"])
    assert exited.value.code == 2
    assert "'July' is not a month; write it as YYYY-MM" in capsys.readouterr().err


def test_spend_that_may_have_been_billed_is_counted_and_flagged(
    frugal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A paid call cut after its request went out is in `paid` (it counts against the budgets),
    and its row, the total and the JSON say how much of it may have been billed."""
    usage = frugal_home / "usage"
    usage.mkdir(parents=True)
    cut = usage_line(
        ts="2026-07-03T08:00:00.000Z",
        provider="serper",
        outcome="transient",
        total_cost_usd=0.001,
        maybe_billed_usd=0.001,
        billed={"serper": 0.001},
        served_ms={},
    )
    served = usage_line(ts="2026-07-03T08:00:01.000Z", provider="serper", total_cost_usd=0.001, cost_usd=0.001)
    (usage / "2026-07.jsonl").write_bytes(encode(cut) + encode(served))
    out = render(tally_month("2026-07")).plain
    assert "search    serper                  1     $0.0010  failed: transient; $0.0010 may have been billed†\n" in out
    assert "you paid                                $0.0020\n  of which may have been billed†        $0.0010\n" in out
    assert "† paid calls cut (deadline, cancel) or failed after their request went out" in out
    assert stats_command(["--month", "2026-07", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["paid_usd"], figures["maybe_billed_usd"]) == (0.002, 0.001)
    assert [(row["outcome"], row["maybe_billed_usd"]) for row in figures["rows"]] == [("ok", 0), ("transient", 0.001)]


def test_a_fleets_month_says_how_many_replicas_it_read(
    tmp_path: Path, frugal_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The usage folder of a fleet (a shared volume, or the replicas' files collected into one
    folder with --dir): one receipt of every replica's file, saying whose."""
    collected = tmp_path / "collected"
    collected.mkdir()
    for n, replica in enumerate(("replica-1", "replica-2", "replica-3"), 1):
        line = encode(usage_line(ts="2026-07-03T08:00:00.000Z", provider="serper", total_cost_usd=0.003))
        (collected / f"2026-07.{replica}.jsonl").write_bytes(line * n)
    assert stats_command(["--month", "2026-07", "--dir", str(collected)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\ntotal +6 +\$0\.0180\n", out)
    assert "read 3 replicas' ledgers: replica-1, replica-2, replica-3\n" in out
    assert stats_command(["--month", "2026-07", "--dir", str(collected), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["calls"], figures["paid_usd"]) == (6, 0.018)
    assert figures["replicas"] == ["replica-1", "replica-2", "replica-3"] and figures["ledger"] == str(collected)
    assert [Path(name).name for name in figures["files"]] == [f"2026-07.replica-{n}.jsonl" for n in (1, 2, 3)]
    write_month(collected)  # and the month's one file from before replica ids
    assert (
        "read 3 replicas' ledgers: replica-1, replica-2, replica-3, and 2026-07.jsonl (written before"
        in render(tally_month("2026-07", collected)).plain
    )
    (collected / "2026-07.jsonl").unlink()
    (collected / "2026-07.replica-2.jsonl").unlink()
    (collected / "2026-07.replica-3.jsonl").unlink()
    assert "read 1 replica's ledger: replica-1\n" in render(tally_month("2026-07", collected)).plain


def test_dir_must_be_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert stats_command(["--dir", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder: name the folder that holds the YYYY-MM.*.jsonl files" in capsys.readouterr().err
