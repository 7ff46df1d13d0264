"""The ledger policy on the real pipeline and the real governor, with fake providers: a month of
calls (answered, failed over, cached, failed, refused, a paid whiff, an extraction that fell
forward to a browser, a plain tool the governor cut) written, read back and added up."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from frugal_proxy.capabilities import ExtractRequest, Page, SearchHit, SearchRequest
from frugal_proxy.config import GovernorSettings, loads
from frugal_proxy.governor.engine import Governor
from frugal_proxy.ledger import reader, replica
from frugal_proxy.ledger.line import UsageLine, encode
from frugal_proxy.ledger.tally import tally_month
from frugal_proxy.ledger.writer import LedgerWriter
from frugal_proxy.pipeline.assembly import assemble
from frugal_proxy.pipeline.pipeline import build_pipeline
from frugal_proxy.policies import Policy
from frugal_proxy.policies.governor import GovernorPolicy
from frugal_proxy.policies.ledger import Ledger, usage_line
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.records import Attempt, CachedAnswer, Call, Exchange, Outcome, Route
from frugal_proxy.state.usage import utc_month

pytestmark = pytest.mark.anyio

RACK = {"search": ("brave", 5_000), "extract": ("firecrawl", 1_000), "browse": ("browserless", 2_000)}
JULY_14 = 1_784_021_401.0  # 2026-07-14T09:30:01Z


class Cache(Policy):
    """Answers a search for "cached" at admit, as the result cache does on a hit."""

    name = "cache"

    async def admit(self, exchange: Exchange) -> None:
        if isinstance(exchange.request, SearchRequest) and exchange.request.query == "cached":
            exchange.answer = jsonrpc.result(exchange.call.request_id, {"content": [], "isError": False})
            exchange.cached = CachedAnswer("serper", 1_000.0)


def hits(name: str, price: int = 0, *, kind: str = "ok") -> FakeProvider:
    async def search(ex: Exchange) -> Outcome:
        if kind != "ok":
            return Outcome(kind, message=f"{name} failed")  # type: ignore[arg-type]
        if ex.request.query == "nothing":
            return Outcome("empty")
        return Outcome("ok", data=[SearchHit("A", "https://a.example/", "a page", name)])

    return FakeProvider(name, search, price, capability="search")


def paging(name: str, capability: str, text: str, price: int) -> FakeProvider:
    async def read(ex: Exchange) -> Outcome:
        return Outcome("ok", data=Page(ex.request.url, markdown=text))

    return FakeProvider(name, read, price, capability=capability)


def plain(body: dict[str, Any]) -> FakeProvider:
    async def answer(ex: Exchange) -> Outcome:
        return Outcome("ok", reply=jsonrpc.result(None, body))

    return FakeProvider("files", answer)


def search(query: str, *providers: str) -> Exchange:
    ex = Exchange(Call(1, "frugal__search", {}), Route("frugal__search", providers, capability="search"))
    ex.request = SearchRequest(query)
    return ex


def tool(name: str, arguments: dict[str, Any]) -> Exchange:
    params = {"name": jsonrpc.raw(name), "arguments": jsonrpc.raw(arguments)}
    return Exchange(Call(2, name, params), Route(name, ("files",)))


def execute() -> Exchange:
    then = Route("frugal__execute", ("browserless",), capability="browse")
    ex = Exchange(Call(3, "frugal__execute", {}), Route("frugal__execute", ("jina",), capability="extract", then=then))
    ex.request = ExtractRequest("https://spa.example/")
    return ex


async def test_a_month_of_calls_is_recorded_and_adds_up(tmp_path: Path) -> None:
    lines: list[UsageLine] = []
    governor = Governor.embedded(GovernorSettings(max_bytes=1024))
    providers = {
        "marginalia": hits("marginalia"),
        "down": hits("down", kind="rate_limited"),
        "serper": hits("serper", 1_000),
        "jina": paging("jina", "extract", "Loading…", 1_000),
        "browserless": paging("browserless", "browse", "The real text. " * 40, 2_000),
        "files": plain({"content": [{"type": "text", "text": "line of text\n" * 2000}]}),
    }
    policies = [Cache(), GovernorPolicy(governor), Ledger(lines, RACK, clock=lambda: JULY_14)]
    pipeline = build_pipeline(providers, policies)
    await pipeline.run(search("proxy", "marginalia"))  # answered, free: rack $0.005
    await pipeline.run(search("proxy", "down", "serper"))  # failed over, $0.001: rack $0.005
    await pipeline.run(search("cached", "serper"))  # the cache answered: rack $0.005, $0
    await pipeline.run(search("proxy", "down"))  # every provider failed: no rack
    await pipeline.run(search("nothing", "serper"))  # a paid zero-hit answer: $0.001, no rack
    await pipeline.run(execute())  # jina nearly empty, fell forward to browserless: $0.003, rack $0.002
    await pipeline.run(tool("dump", {"path": "/srv"}))  # cut by the governor
    await pipeline.run(tool("dump", {"path": "/srv"}))  # the repeat is refused at admit

    assert [(line.tool, line.provider, line.outcome) for line in lines] == [
        ("frugal__search", "marginalia", "ok"),
        ("frugal__search", "serper", "ok"),
        ("frugal__search", None, "cached"),
        ("frugal__search", "down", "rate_limited"),
        ("frugal__search", "serper", "empty"),
        ("frugal__execute", "browserless", "ok"),
        ("dump", "files", "ok"),
        ("dump", None, "denied"),
    ]
    over, cached, failed, whiff, forward, cut, denied = lines[1:]
    assert (over.attempts, over.cost_usd, over.billed, over.served_ms.keys()) == (
        2,
        0.001,
        {"serper": 0.001},
        {"serper"},
    )
    assert cached.cached and cached.attempts == 0 and cached.rack_usd == 0.005 and cached.rack_provider == "brave"
    assert failed.served_ms == {} and failed.billed == {}
    assert whiff.billed == {"serper": 0.001} and whiff.served_ms == {}
    assert (forward.capability, forward.cost_usd, forward.total_cost_usd) == ("browse", 0.002, 0.003)
    assert forward.billed == {"jina": 0.001, "browserless": 0.002} and forward.rack_usd == 0.002
    assert forward.billed_under == {"jina": {"extract": 0.001}}  # its daily budget is the extract table's
    assert all(line.billed_under == {} for line in lines if line is not forward)
    assert cut.bytes_total > 26_000 and cut.bytes_returned <= 1024 + 512
    assert cut.tokens_total == -(-cut.bytes_total // 4) and cut.tokens_returned == -(-cut.bytes_returned // 4)
    assert (cut.capability, cut.rack_usd, cut.rack_provider) == (None, 0.0, None)  # a plain tool: its own price
    assert denied.attempts == 0 and denied.ts == "2026-07-14T09:30:01.000Z"
    assert all(line.operator == "local" and line.latency_ms >= 0 for line in lines)

    ledger = LedgerWriter(tmp_path)
    for line in lines:
        ledger.append(line)
    assert ledger.flush()
    month = tally_month("2026-07", tmp_path)
    assert (month.calls, month.paid, month.rack) == (8, 5_000, 17_000)
    assert month.failed == 3 and month.saved == 12_000
    assert month.tokens_kept_out == sum(max(0, line.tokens_total - line.tokens_returned) for line in lines)
    assert month.tokens_kept_out >= cut.tokens_total - cut.tokens_returned


async def test_a_line_never_holds_arguments_or_result_text() -> None:
    lines: list[UsageLine] = []
    secret = {"content": [{"type": "text", "text": "the secret result"}]}
    pipeline = build_pipeline({"files": plain(secret)}, [Ledger(lines)])
    await pipeline.run(tool("read", {"path": "/home/me/the-secret-argument"}))
    data = encode(lines[0])
    assert b"secret" not in data
    assert set(json.loads(data)) == set(UsageLine.__struct_fields__)


async def test_a_priced_plain_tool_is_its_own_rack_rate() -> None:
    lines: list[UsageLine] = []

    async def answer(ex: Exchange) -> Outcome:
        return Outcome("ok", reply=jsonrpc.result(None, {"content": []}))

    pipeline = build_pipeline({"notes": FakeProvider("notes", answer, 2_500)}, [Ledger(lines, RACK)])
    await pipeline.run(Exchange(Call(1, "add", {}), Route("add", ("notes",))))
    assert (lines[0].cost_usd, lines[0].rack_usd, lines[0].rack_provider) == (0.0025, 0.0025, None)


async def test_the_writer_makes_each_line_from_what_the_seal_read(tmp_path: Path) -> None:
    """Over the ledger's writer the line is made in its worker, from the facts the seal read: the
    same line as one made at the seal, its latency the call's as far as the seal (not until the
    worker ran), and the exchange is not kept for it."""
    writer = LedgerWriter(tmp_path)
    made_now: list[UsageLine] = []
    pipeline = build_pipeline(
        {"files": plain({"content": [{"type": "text", "text": "x" * 300}]})},
        [
            Ledger(writer, RACK, clock=lambda: JULY_14),
            Ledger(made_now, RACK, clock=lambda: JULY_14),
        ],
    )
    exchanges = [tool("read", {"n": n}) for n in range(3)]
    for exchange in exchanges:
        await pipeline.run(exchange)
    sealed = time.monotonic()
    await anyio.sleep(0.05)  # a line made when the worker runs would have a longer latency
    assert writer.flush()
    written = list(reader.lines(tmp_path / f"{utc_month(JULY_14)}.jsonl", UsageLine))
    assert len(written) == 3
    for line, now in zip(written, made_now, strict=True):
        assert line.latency_ms <= now.latency_ms  # read at the seal, before the other ledger's
        assert line.latency_ms < (sealed - exchanges[0].call.started_at) * 1000 + 1
        assert msgspec.structs.replace(line, latency_ms=0.0) == msgspec.structs.replace(now, latency_ms=0.0)
    assert written[0].bytes_returned > 300 and written[0].ts == "2026-07-14T09:30:01.000Z"


def test_usage_line_of_an_exchange_that_never_ran() -> None:
    ex = Exchange(Call(1, "add", {}), Route("add", ("notes",)))
    line = usage_line(ex, {}, JULY_14)
    assert (line.provider, line.outcome, line.bytes_total, line.cost_usd) == (None, "no_provider", 0, 0.0)


def test_one_name_in_two_tables_bills_each_table_its_part() -> None:
    """`mine` is an extract provider and a browse provider (two upstream tools' tables): an
    extraction by it that fell forward to its render bills $0.002 under extract and $0.003
    under browse, and the line keeps both parts for the two daily budgets."""
    ex = Exchange(Call(1, "frugal__execute", {}), Route("frugal__execute", ("browse/mine",), capability="browse"))
    ex.attempts = [
        Attempt("mine", "empty", 10.0, 2_000, capability="extract"),
        Attempt("mine", "ok", 900.0, 3_000, capability="browse"),
    ]
    line = usage_line(ex, {}, JULY_14)
    assert line.billed == {"mine": 0.005}
    assert line.billed_under == {"mine": {"extract": 0.002, "browse": 0.003}}


async def test_assemble_adds_the_ledger_with_the_configs_rack_rates(frugal_home: Path) -> None:
    config = loads("[search_providers.wikipedia]\ncost_per_call = 0.009\npremium = true\n")
    assembly = assemble(config=config, environ={})
    ledgers = [policy for policy in assembly.policies if isinstance(policy, Ledger)]
    assert len(ledgers) == 1 and ledgers[0].rack["search"] == ("wikipedia", 9_000)  # above every built-in premium price
    # The wrap form (no config): plain tools only, each its own rack rate.
    assert next(p for p in assemble().policies if isinstance(p, Ledger)).rack == {}
    await assembly.aclose()


async def test_frugal_stats_off_writes_nothing(frugal_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRUGAL_STATS", "off")
    assembly = assemble()
    assert not any(isinstance(policy, Ledger) for policy in assembly.policies)
    pipeline = build_pipeline({"files": plain({"content": []})}, assembly.policies)
    await pipeline.run(tool("read", {}))
    assert not (frugal_home / "usage").exists()
    monkeypatch.setenv("FRUGAL_STATS", "on")
    on = assemble()
    pipeline = build_pipeline({"files": plain({"content": []})}, on.policies)
    await pipeline.run(tool("read", {}))
    [ledger] = [policy for policy in on.policies if isinstance(policy, Ledger)]
    assert ledger.sink.flush()  # type: ignore[attr-defined]
    [path] = reader.month_files(lines_month())  # this process's replica file
    assert reader.replica_of(path, lines_month()) == replica.replica_id()
    found = list(reader.lines(path, UsageLine))
    assert [line.tool for line in found] == ["read"]


def lines_month() -> str:
    return utc_month(time.time())
