"""A month of usage lines with every kind of call, and its receipt worked out by hand.

#  day    tool             provider     outcome       paid     rack    kept out
1  07-01  frugal__search   marginalia   ok            0        0.005   900
2  07-01  frugal__search   serper       ok (2nd try)  0.001    0.005
3  07-01  frugal__search   -            cached        0        0.005
4  07-02  frugal__search   wikipedia    rate_limited  0        -       (failed: no rack)
5  07-02  frugal__execute  browserless  ok            0.003    0.002   (extract fell forward
                                                                      to browse: both billed)
6  07-02  files__read      files        ok            0        0       8000
7  07-02  add              notes        ok            0.0025   0.0025  (a priced plain tool)
8  07-02  frugal__search   serper       empty         0.001    -       (a paid zero-hit whiff)
9  07-02  frugal__extract  -            denied        0        -       (refused at admit)
   and a torn last line (a crash mid-write)

calls 9; paid 0.0075; rack 0.0195; saved 0.012 (61.5%); kept out 8,900 tokens
07-01: 3 calls, paid 0.001, rack 0.015, saved 0.014
07-02: 6 calls, paid 0.0065, rack 0.0045, saved -0.002
"""

from __future__ import annotations

from pathlib import Path

from frugal_proxy.ledger.line import UsageLine, encode
from tests.ledger_lines import usage_line

DAY1, DAY2 = "2026-07-01T10:00:00.000Z", "2026-07-02T23:59:59.999Z"


def month_lines() -> list[UsageLine]:
    return [
        usage_line(ts=DAY1, tokens_total=1200, tokens_returned=300),
        usage_line(
            ts=DAY1,
            provider="serper",
            cost_usd=0.001,
            total_cost_usd=0.001,
            attempts=2,
            billed={"serper": 0.001},
            served_ms={"serper": 250.0},
        ),
        usage_line(ts=DAY1, provider=None, outcome="cached", cached=True, attempts=0, served_ms={}),
        usage_line(ts=DAY2, provider="wikipedia", outcome="rate_limited", attempts=1, served_ms={}),
        usage_line(
            ts=DAY2,
            tool="frugal__execute",
            capability="browse",
            provider="browserless",
            cost_usd=0.002,
            total_cost_usd=0.003,
            rack_usd=0.002,
            rack_provider="browserless",
            attempts=2,
            billed={"firecrawl": 0.001, "browserless": 0.002},
            billed_under={"firecrawl": {"extract": 0.001}},
            served_ms={"firecrawl": 300.0, "browserless": 2100.0},
        ),
        usage_line(
            ts=DAY2,
            tool="files__read",
            capability=None,
            provider="files",
            rack_usd=0.0,
            rack_provider=None,
            tokens_total=10_000,
            tokens_returned=2_000,
            served_ms={"files": 3.5},
        ),
        usage_line(
            ts=DAY2,
            tool="add",
            capability=None,
            provider="notes",
            cost_usd=0.0025,
            total_cost_usd=0.0025,
            rack_usd=0.0025,
            rack_provider=None,
            billed={"notes": 0.0025},
            served_ms={"notes": 2.0},
        ),
        usage_line(
            ts=DAY2,
            provider="serper",
            outcome="empty",
            cost_usd=0.001,
            total_cost_usd=0.001,
            billed={"serper": 0.001},
            served_ms={},
        ),
        usage_line(
            ts=DAY2,
            tool="frugal__extract",
            capability="extract",
            provider=None,
            outcome="denied",
            rack_usd=0.003,
            served_ms={},
        ),
    ]


def write_month(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "2026-07.jsonl"
    path.write_bytes(b"".join(encode(line) for line in month_lines()) + encode(usage_line())[:50])
    return path
