"""A usage line: what it holds, how it is encoded, and that it always fits one atomic append."""

from __future__ import annotations

import json

import msgspec

from frugal_proxy.ledger.line import MAX_LINE, UsageLine, encode, micros, month_of, timestamp, usd
from tests.ledger_lines import usage_line


def test_a_line_is_one_json_object_ending_in_a_newline() -> None:
    data = encode(usage_line(billed={"serper": 0.001}))
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    decoded = json.loads(data)
    assert decoded["tool"] == "frugal__search" and decoded["billed"] == {"serper": 0.001}
    assert decoded["v"] == 1
    assert msgspec.json.decode(data, type=UsageLine) == usage_line(billed={"serper": 0.001})


def test_amounts_go_through_micro_dollars_exactly() -> None:
    for amount in (0, 1, 1000, 2500, 5000, 8000, 123_456, 10**12 + 1):
        assert micros(usd(amount)) == amount
        assert micros(json.loads(json.dumps(usd(amount)))) == amount
    assert json.dumps(usd(5000)) == "0.005"


def test_timestamps_are_utc_with_milliseconds() -> None:
    assert timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert timestamp(1_784_021_401.1239) == "2026-07-14T09:30:01.123Z"
    assert month_of("2026-07-14T09:30:01.123Z") == "2026-07"


def test_a_line_with_huge_names_still_fits_one_atomic_append() -> None:
    big = "x" * 5000
    line = usage_line(
        tool=big,
        provider="é" * 3000,
        operator=big,
        rack_provider=big,
        billed={f"{big}{n}": 0.001 for n in range(40)},
        served_ms={f"{big}{n}": 1.0 for n in range(40)},
    )
    data = encode(line)
    assert len(data) <= MAX_LINE and data.endswith(b"\n")
    decoded = msgspec.json.decode(data, type=UsageLine)
    assert decoded.tool.startswith("xxx") and decoded.outcome == "ok"


def test_an_ordinary_line_is_left_whole() -> None:
    line = usage_line(tool="files__read_file", provider="files", capability=None)
    assert msgspec.json.decode(encode(line), type=UsageLine) == line
    assert len(encode(line)) < 600
