"""The status page's data builder over a real assembly (no provider is called): each provider's
row in the strategy's order with its spend against its cap, free quota left, cooldown, p50 and
recent errors; the providers that are off and why; the calls; the month per day, exact; the
upstream rows; a status file from before the page."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from frugal_proxy import config as config_module
from frugal_proxy.ledger.line import encode
from frugal_proxy.ledger.tally import tally_month
from frugal_proxy.pipeline.assembly import Assembly, assemble
from frugal_proxy.providers import registry
from frugal_proxy.server.ui_data import (
    SCHEMA,
    LiveSource,
    MonthCache,
    call_rows,
    month_view,
    page_data,
    provider_rows,
    status_entry,
    upstream_row,
)
from frugal_proxy.state.recent_calls import AttemptRecord, CallRecord
from frugal_proxy.state.spend import spend_key
from tests.ledger_lines import usage_line
from tests.ledger_month import write_month

pytestmark = pytest.mark.anyio

KEEP = ("wikipedia", "tavily", "exa", "marginalia")
OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name not in KEEP
)
CONFIG = (
    OFF
    + """
[search_providers.tavily]
cost_per_call = 0.008
free_quota_monthly = 0
daily_budget_usd = "0.03"
[search_providers.exa]
cost_per_call = 0.005
free_quota_monthly = 10
[routing.search]
deny = ["marginalia"]
"""
)


def assembly() -> Assembly:
    return assemble(config=config_module.loads(CONFIG), environ={"TAVILY_API_KEY": "k", "EXA_API_KEY": "k"})


def by_name(rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(row["name"]): row for row in rows if row["capability"] == "search"}


async def test_providers_in_the_strategys_order_with_their_standing() -> None:
    built = assembly()
    assert built.budget is not None and built.cooldown is not None and built.feeds is not None
    await built.budget.book.reserve(spend_key("search", "tavily"), 8_000, 30_000)
    assert await built.feeds.usage.reserve("exa", 10) is not None
    await built.cooldown.book.fence("wikipedia", time.time() + 42)
    built.recent.add(
        CallRecord(
            time.time(),
            "frugal__search",
            "search",
            "tavily",
            "ok",
            8_000,
            90.0,
            0,
            (AttemptRecord("wikipedia", "rate_limited", 3.0), AttemptRecord("tavily", "ok", 85.0, 8_000)),
        )
    )
    rows = provider_rows(built)
    search = [row for row in rows if row["capability"] == "search"]
    # cheap: the free one, then the one with free quota left (it counts as free), then the paid
    assert [(row["name"], row["place"]) for row in search if row["on"]] == [
        ("wikipedia", 1),
        ("exa", 2),
        ("tavily", 3),
        ("marginalia", None),
    ]
    named = by_name(rows)
    assert named["marginalia"]["why"] == "denied by the routing config: never called"
    tavily = named["tavily"]
    assert tavily["spent_today"] == {"micros": 8_000, "usd": "$0.0080"}
    assert tavily["daily_budget"] == {"micros": 30_000, "usd": "$0.0300"}
    assert tavily["price"] == {"micros": 8_000, "usd": "$0.0080"}
    assert tavily["p50_ms"] == 85.0 and tavily["errors_15m"] == 0 and tavily["cooldown_s"] is None
    assert named["exa"]["free_left"] == 9 and named["exa"]["free_quota_monthly"] == 10
    wikipedia = named["wikipedia"]
    assert wikipedia["errors_15m"] == 1 and wikipedia["spent_today"] is None and wikipedia["daily_budget"] is None
    assert isinstance(wikipedia["cooldown_s"], float) and 40 < wikipedia["cooldown_s"] <= 42
    assert named["searxng"] == {
        "capability": "search",
        "name": "searxng",
        "on": False,
        "why": "disabled in the config",
        "strategy": "cheap",
    }
    assert {row["capability"] for row in rows} == {"search", "extract", "browse"}


def test_with_no_routed_providers_the_list_is_empty() -> None:
    assert provider_rows(assemble()) == []


def test_calls_carry_exact_money_and_no_more_than_the_record() -> None:
    record = CallRecord(1.0, "add", None, "notes", "ok", 2_500, 3.5, 1_024, (AttemptRecord("notes", "ok", 3.0, 2_500),))
    (row,) = call_rows([record])
    assert row == {
        "id": 0,
        "at": 1.0,
        "tool": "add",
        "capability": None,
        "provider": "notes",
        "outcome": "ok",
        "cost": {"micros": 2_500, "usd": "$0.0025"},
        "latency_ms": 3.5,
        "cut_bytes": 1_024,
        "operator": "local",
        "attempts": [
            {
                "provider": "notes",
                "outcome": "ok",
                "latency_ms": 3.0,
                "cost": {"micros": 2_500, "usd": "$0.0025"},
                "retries": 0,
                "free_quota": False,
            }
        ],
    }


def test_the_month_per_day_is_exact_and_may_be_below_zero(tmp_path: Path) -> None:
    write_month(tmp_path)
    view = month_view(tally_month("2026-07", tmp_path))
    assert view["calls"] == 9
    assert view["paid"] == {"micros": 7_500, "usd": "$0.0075"}
    assert view["saved"] == {"micros": 12_000, "usd": "$0.0120"}
    assert [(day["day"], day["calls"], day["saved"]) for day in view["days"]] == [
        ("2026-07-01", 3, {"micros": 14_000, "usd": "$0.0140"}),
        ("2026-07-02", 6, {"micros": -2_000, "usd": "-$0.0020"}),
    ]


def test_an_upstream_that_did_not_answer_its_probe_is_unresponsive() -> None:
    up = {"state": "up", "era": "modern", "pid": 7, "restarts": 2}
    assert upstream_row("notes", up, 3) == {
        "name": "notes",
        "state": "up",
        "reason": None,
        "era": "modern",
        "restarts": 2,
        "retry_in_s": None,
        "transport": "stdio",
        "tools": 3,
    }
    silent = upstream_row("notes", up, 3, answered=False)
    assert silent["state"] == "unresponsive" and "did not answer 2 probes in a row" in str(silent["reason"])
    down = upstream_row("web", {"state": "down", "reason": "connection refused", "retry_in_s": 4.5}, None)
    assert (down["state"], down["reason"], down["retry_in_s"], down["tools"]) == (
        "down",
        "connection refused",
        4.5,
        None,
    )
    url = upstream_row("remote", {"state": "up", "era": None, "transport": "streamable-http", "reconnects": 1}, None)
    assert (url["restarts"], url["transport"]) == (1, "streamable-http")


def test_a_status_file_from_before_the_page_still_shows_its_upstreams() -> None:
    record = {"pid": 42, "started_at": 1.0, "updated_at": 2.0, "upstreams": {"notes": {"state": "not started"}}}
    entry = status_entry(record)
    assert entry["pid"] == 42 and entry["providers"] == [] and entry["calls"] == []
    assert [row["state"] for row in entry["upstreams"]] == ["not started"]
    written = {**record, "page": {"pid": 42, "calls": [{"tool": "add"}]}}
    assert status_entry(written) == {"pid": 42, "calls": [{"tool": "add"}]}


def test_the_answer_names_its_schema_and_source() -> None:
    data = page_data([], None, None, source="status files", now=5.0)
    assert data == {
        "schema": SCHEMA,
        "source": "status files",
        "scope": "all",
        "generated_at": 5.0,
        "serves": [],
        "month": None,
        "replicas": None,
    }


class Upstream:
    """What the probe reads of a connection: running, its era, whether it answers."""

    def __init__(self, name: str) -> None:
        self.name, self.running, self.era, self.answering = name, True, "legacy", True
        self.asked = 0

    def state(self) -> dict[str, object]:
        return {"state": "up", "era": self.era, "pid": 1, "restarts": 0}

    async def answers(self, within: float, *, quiet: bool = False) -> bool:
        self.asked += 1
        return self.answering


async def test_an_upstream_is_unresponsive_after_two_missed_probes_and_up_once_it_answers() -> None:
    silent, fine, starting = Upstream("silent"), Upstream("fine"), Upstream("starting")
    silent.answering, starting.era = False, None  # `starting` has no era yet: never probed
    source = LiveSource(assemble(), [silent, fine, starting], lambda name: None, "r1")  # type: ignore[list-item]

    async def states() -> dict[str, str]:
        return {row["name"]: row["state"] for row in (await source.entry())["upstreams"]}

    assert await states() == {"silent": "up", "fine": "up", "starting": "up"}  # one miss: maybe a race
    source._due = 0.0  # the next probe is due (after a miss it comes PROBE_WITHIN later)
    assert await states() == {"silent": "unresponsive", "fine": "up", "starting": "up"}
    silent.answering = True
    source._due = 0.0
    assert await states() == {"silent": "up", "fine": "up", "starting": "up"}
    assert (silent.asked, fine.asked, starting.asked) == (3, 3, 0)
    assert await states() == {"silent": "up", "fine": "up", "starting": "up"}
    assert silent.asked == 3  # not due: a poll never probes on its own


def test_the_month_is_read_incrementally_and_agrees_with_stats(tmp_path: Path) -> None:
    path = write_month(tmp_path)  # nine lines, then a torn one still being written (no newline)
    cache = MonthCache(tmp_path)
    first = cache.catch_up("2026-07")
    assert (first.calls, first.paid, first.rack) == (9, 7_500, 19_500)
    with path.open("ab") as handle:  # the torn line ends (unreadable: skipped), a new day's line follows
        handle.write(b"\n" + encode(usage_line(ts="2026-07-03T08:00:00.000Z", provider="tavily", total_cost_usd=0.008)))
    second = cache.catch_up("2026-07")
    whole = tally_month("2026-07", tmp_path)
    assert (second.calls, second.paid, second.rack) == (whole.calls, whole.paid, whole.rack) == (10, 15_500, 24_500)
    assert [(day.day, day.calls, day.saved) for day in second.days] == [
        (day.day, day.calls, day.saved) for day in whole.days
    ]
    assert cache.catch_up("2026-07").calls == 10  # nothing new: nothing added twice
    path.write_bytes(encode(usage_line(ts="2026-07-05T08:00:00.000Z")))  # replaced by a shorter file
    assert [(day.day, day.calls) for day in cache.catch_up("2026-07").days] == [("2026-07-05", 1)]
    assert cache.catch_up("2026-08").calls == 0  # a new month starts from nothing


def test_a_file_that_cannot_be_read_loses_no_line_of_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offsets move with the tally: an OSError on a later file leaves the earlier files' new
    lines to be read again, never skipped."""
    from frugal_proxy.ledger import reader

    for replica in ("a", "b"):  # two replicas' files of nine lines each
        write_month(tmp_path).rename(tmp_path / f"2026-07.{replica}.jsonl")
    real = reader.appended
    failing = {"2026-07.b.jsonl"}

    def appended(path: Path, *args: object, **kwargs: object) -> object:
        if path.name in failing:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "appended", appended)
    cache = MonthCache(tmp_path)
    with pytest.raises(OSError):
        cache.catch_up("2026-07")
    failing.clear()
    assert cache.catch_up("2026-07").calls == 18 == tally_month("2026-07", tmp_path).calls


def test_a_damaged_line_is_said_once_with_its_line_number(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_month(tmp_path)  # nine lines, then a torn one still being written
    cache = MonthCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.ledger"):
        cache.catch_up("2026-07")
        assert caplog.records == []  # a line still being written is not damage
        with path.open("ab") as handle:  # it ends unreadable: line 10
            handle.write(b"\n" + encode(usage_line(ts="2026-07-03T08:00:00.000Z")))
        assert cache.catch_up("2026-07").calls == 10
        assert [(r.getMessage(), getattr(r, "lines", None)) for r in caplog.records] == [
            ("usage ledger: skipped 1 unreadable line(s) (a crash mid-write leaves a torn one)", "10")
        ]
        cache.catch_up("2026-07")
        assert len(caplog.records) == 1  # said once
        with path.open("ab") as handle:
            handle.write(b"{torn\n")  # line 12
        cache.catch_up("2026-07")
        assert [getattr(r, "lines", None) for r in caplog.records] == ["10", "12"]


async def test_a_poll_never_blocks_the_loop(tmp_path: Path) -> None:
    """Building /ui/data (the month's tally included: a thread reads the ledger) makes no
    blocking call on the event loop (blockbuster raises on one from frugal_proxy's code)."""
    from blockbuster import blockbuster_ctx

    write_month(tmp_path)
    built = assembly()
    source = LiveSource(built, [Upstream("notes")], lambda name: 3, "r1", month=MonthCache(tmp_path))  # type: ignore[list-item]
    with blockbuster_ctx(["frugal_proxy"]):
        data = await source.data()
    assert data["serves"][0]["upstreams"][0]["tools"] == 3 and data["month"] is not None


async def test_a_hung_upstream_is_said_once_per_change_not_once_per_probe(caplog: pytest.LogCaptureFixture) -> None:
    hung = Upstream("hung")
    hung.answering = False
    source = LiveSource(assemble(), [hung], lambda name: None, "r1")  # type: ignore[list-item]
    with caplog.at_level(logging.INFO, logger="frugal_proxy.ui"):
        for _ in range(5):
            await source.probe()
        hung.answering = True
        await source.probe()
        await source.probe()
        hung.answering = False
        for _ in range(3):
            await source.probe()
    said = [(r.levelname, r.getMessage(), getattr(r, "upstream", None)) for r in caplog.records]
    assert said == [
        ("WARNING", "upstream did not answer its health probes", "hung"),
        ("INFO", "upstream answers its health probes again", "hung"),
        ("WARNING", "upstream did not answer its health probes", "hung"),
    ]
    assert hung.asked == 10


async def test_no_upstream_is_probed_while_no_page_is_viewed() -> None:
    hung = Upstream("hung")
    hung.answering = False
    source = LiveSource(assemble(), [hung], lambda name: None, "r1")  # type: ignore[list-item]
    await source.probe()
    await source.probe()
    assert [row["state"] for row in (await source.entry(probe=False))["upstreams"]] == ["up"]  # not a stale verdict
    for _ in range(3):
        await source.entry(probe=False)
    assert hung.asked == 2
    await source.entry()  # a page polls again: probed at once
    assert hung.asked == 3


async def test_a_probe_that_raises_counts_as_a_miss_and_never_escapes() -> None:
    class Broken(Upstream):
        async def answers(self, within: float, *, quiet: bool = False) -> bool:
            raise RuntimeError("the connection went away mid-probe")

    broken = Broken("broken")
    source = LiveSource(assemble(), [broken], lambda name: None, "r1")  # type: ignore[list-item]
    await source.probe()
    await source.probe()
    assert [row["state"] for row in (await source.entry())["upstreams"]] == ["unresponsive"]
