"""The groups a result is read as, sans-IO: what a group costs over its copies, lines counted
as records, a cut that keeps whole lines, and the marker that names what is missing."""

from __future__ import annotations

import msgspec

from frugal_proxy.config import Budget
from frugal_proxy.governor.groups import Cut, RecordsGroup, TextGroup, marker
from frugal_proxy.governor.result_parts import Text


def text(value: str, location: tuple[object, ...] = ("content", 0, "text")) -> Text:
    return Text(location, "content[0].text", msgspec.Raw(msgspec.json.encode(value)), None)


def test_a_text_group_costs_its_payload_once_per_copy() -> None:
    group = TextGroup(text("abc def " * 100), "text", None)
    alone = group.cost
    group.copies.append(("structuredContent", "result"))
    assert group.share == 2 and group.cost >= 2 * alone - 1 and group.chars_total == 2 * group.chars
    assert group.touches_structured


def test_a_log_is_cut_on_whole_lines_within_its_record_budget() -> None:
    log = "".join(f"2026-01-01 line {n}\n" for n in range(100))
    group = TextGroup(text(log), "text", None)
    assert group.mode == "lines" and group.records == 100 and not group.fits(Budget(max_records=50))
    cut = group.cut(10_000, 10_000, Budget(max_records=10))
    kept = cut.payload[: cut.returned_bytes]
    assert cut.returned_records == 10 and kept.endswith(b"\n") and kept.count(b"\n") == 10


def test_a_records_group_keeps_its_first_items_as_valid_json() -> None:
    items = [msgspec.Raw(msgspec.json.encode({"id": n, "pad": "x" * 50})) for n in range(20)]
    payload = msgspec.json.encode({"result": items})
    group = RecordsGroup(None, payload, ({"result": items}, "result", items))
    cut = group.cut(400, 400, Budget())
    kept = msgspec.json.decode(group._encoded(cut.returned_records or 0))
    assert cut.returned_records == len(kept["result"]) and 0 < len(kept["result"]) < 20
    assert group.fits(Budget(max_records=20)) and not group.fits(Budget(max_records=19))


def test_the_marker_names_what_is_left_and_how_to_fetch_it() -> None:
    cut = Cut("content[0].text", "lines", b"a\nb\nc\n", 2, 6, 2, total_records=3, returned_records=1)
    line = marker(cut, "art_1")
    assert "1 of 3 lines (2 of 6 chars)" in line and '"artifact_id":"art_1"' in line and '"offset":2' in line
    assert "could not be kept" in marker(cut, None)
