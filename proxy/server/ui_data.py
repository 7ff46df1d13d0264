"""The status page's data (`GET /ui/data`, docs/ui.md has the schema), built from what a serve
holds and what the usage ledger tallies.

    serve_entry     one serve as the page shows it: its upstreams, its providers by capability,
                    its last calls (what `serve`'s status file carries too, for `frugal-proxy ui`)
    upstream_rows   each upstream: up, down, unresponsive (it did not answer a probe) or not
                    started, and why; restarts, era, tool count
    provider_rows   each provider by capability: on or off and why, its place in the strategy's
                    order, spend today against its daily cap, free quota left this month, the
                    cooldown's seconds left, observed p50 latency, errors in the last 15 minutes
    call_rows       the ring of recent calls (state.recent_calls), newest first
    month_view      this month's receipt per day (ledger.tally): calls, paid, rack, saved
    page_data       the whole answer: schema version, the serves, the month, the replicas seen
    scoped          the answer as an operator who does not see everything sees it: its own calls
    MonthCache      the month's tally, read incrementally: each read adds only the lines the
                    ledger's files gained since the one before
    LiveSource      what `serve --http` answers /ui/data from: its own assembly and upstreams,
                    probed at most every PROBE_EVERY seconds, the tally at most every TALLY_EVERY

Money is integer micro-dollars (`*_micros`) beside its exact text (`money.format_usd`), never a
float. Nothing here reads a call's arguments or result: the ring never held them.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread

from frugal_proxy import ledger
from frugal_proxy.capabilities import CAPABILITIES
from frugal_proxy.identities import LOCAL
from frugal_proxy.ledger import reader, tally
from frugal_proxy.ledger.replica import replica_id
from frugal_proxy.money import format_usd
from frugal_proxy.policies.routing import has_quota
from frugal_proxy.records import ProviderSpec
from frugal_proxy.state.recent_calls import ERROR_WINDOW, CallRecord, RecentCalls
from frugal_proxy.state.spend import spend_key
from frugal_proxy.state.usage import utc_month
from frugal_proxy.upstream.base import UpstreamBase

if TYPE_CHECKING:
    from frugal_proxy.pipeline.assembly import Assembly
    from frugal_proxy.router.router import Router

log = logging.getLogger("frugal_proxy.ui")

SCHEMA = 1
DATA_PATH = "/ui/data"
PAGE_PATH = "/ui"
PROBE_EVERY = 10.0  # seconds between health probes of the upstreams (never one per poll)
PROBE_WITHIN = 2.0  # seconds an upstream has to answer one
MISSES_UNRESPONSIVE = 2  # probes in a row an upstream that is up must miss to be shown unresponsive
TALLY_EVERY = 5.0  # seconds a month tally is reused before the ledger is read again
CALLS_SHOWN = 50

Json = dict[str, Any]


def money(micros: int) -> Json:
    """An amount as the page shows it: exact micro-dollars and their text."""
    return {"micros": micros, "usd": _usd(micros)}


_usd = functools.lru_cache(maxsize=4096)(format_usd)  # a poll shows the same few prices many times


def signed(micros: int) -> Json:
    """`money` of an amount that may be below zero (a month the cheap route cost more)."""
    return money(micros) if micros >= 0 else {"micros": micros, "usd": "-" + format_usd(-micros)}


def upstream_rows(
    connections: Iterable[UpstreamBase],
    tools: Callable[[str], int | None],
    answered: Mapping[str, bool] | None = None,
) -> list[Json]:
    """Each upstream's row. `answered`: the last probe's verdict per upstream (an upstream that
    is up but did not answer is `unresponsive`); `tools`: how many tools it listed (None: not
    listed yet)."""
    rows = []
    for connection in connections:
        state = dict(connection.state())
        rows.append(upstream_row(connection.name, state, tools(connection.name), (answered or {}).get(connection.name)))
    return rows


def upstream_row(name: str, state: Mapping[str, Any], tools: int | None, answered: bool | None = None) -> Json:
    """One upstream's row from its `state()` (or the same dict read back from a status file)."""
    shown = str(state.get("state", "unknown"))
    reason = state.get("reason")
    if shown == "up" and answered is False:
        shown = "unresponsive"
        reason = (
            f"connected, but it did not answer {MISSES_UNRESPONSIVE} probes in a row within {PROBE_WITHIN:g} s each"
        )
    restarts = state.get("restarts", state.get("reconnects", 0))
    return {
        "name": name,
        "state": shown,
        "reason": None if reason is None else str(reason),
        "era": state.get("era"),
        "restarts": restarts if isinstance(restarts, int) else 0,
        "retry_in_s": state.get("retry_in_s"),
        "transport": state.get("transport", "stdio" if "pid" in state else None),
        "tools": tools,
    }


def provider_rows(assembly: Assembly, now: float | None = None) -> list[Json]:
    """Every routed provider, on or off, capability by capability, in the strategy's order."""
    now = time.time() if now is None else now
    feeds = assembly.feeds
    specs = feeds.specs if feeds is not None else []
    recent = assembly.recent
    cooling = assembly.cooldown.remaining([spec.name for spec in specs]) if assembly.cooldown is not None else {}
    rows: list[Json] = []
    for capability in CAPABILITIES:
        mine = [spec for spec in specs if spec.capability == capability]
        strategy, ordered = "cheap", mine
        if assembly.routing is not None:
            strategy, ordered = assembly.routing.standing_order(capability, mine)
        places = {spec.name: number for number, spec in enumerate(ordered, 1)}
        for spec in sorted(mine, key=lambda s: places.get(s.name, len(places) + 1)):
            place, left = places.get(spec.name), cooling.get(spec.name, 0.0)
            rows.append(_on_row(assembly, spec, strategy, place, left, recent, now))
        for name, why in assembly.off_by_capability.get(capability, {}).items():
            rows.append({"capability": capability, "name": name, "on": False, "why": why, "strategy": strategy})
    return rows


def _on_row(
    assembly: Assembly,
    spec: ProviderSpec,
    strategy: str,
    place: int | None,
    cooldown: float,
    recent: RecentCalls,
    now: float,
) -> Json:
    cap = spent = None
    if assembly.budget is not None and not spec.free:  # a free provider never spends
        key = spend_key(spec.capability, spec.name)
        cap = assembly.budget.caps.get(key)
        spent = assembly.budget.book.spent(key)
    free_left = None
    if has_quota(spec) and assembly.feeds is not None:
        free_left = max(0, spec.free_quota_monthly - assembly.feeds.usage.calls_this_month(spec.name))
    p50 = recent.p50_ms(spec.name)
    return {
        "capability": spec.capability,
        "name": spec.name,
        "on": True,
        "why": "denied by the routing config: never called" if place is None else None,
        "strategy": strategy,
        "place": place,
        "price": money(spec.price_micros),
        "premium": spec.premium,
        "spent_today": None if spent is None else money(spent),
        "daily_budget": None if cap is None else money(cap),
        "free_quota_monthly": spec.free_quota_monthly if has_quota(spec) else None,
        "free_left": free_left,
        "cooldown_s": round(cooldown, 1) if cooldown > 0 else None,
        "cooldown_until": round(now + cooldown, 1) if cooldown > 0 else None,
        "p50_ms": None if p50 is None else round(p50, 1),
        "errors_15m": recent.errors(spec.name, ERROR_WINDOW),
    }


def call_rows(calls: Sequence[CallRecord]) -> list[Json]:
    """The recent calls as the page lists them."""
    return [
        {
            "id": call.number,
            "at": call.at,
            "tool": call.tool,
            "capability": call.capability,
            "provider": call.provider,
            "outcome": call.outcome,
            "cost": money(call.cost_micros),
            "latency_ms": call.latency_ms,
            "cut_bytes": call.cut_bytes,
            "operator": call.operator,
            "attempts": [
                {
                    "provider": a.provider,
                    "outcome": a.outcome,
                    "latency_ms": a.latency_ms,
                    "cost": money(a.cost_micros),
                    "retries": a.retries,
                    "free_quota": a.free_quota,
                }
                for a in call.attempts
            ],
        }
        for call in calls
    ]


def serve_entry(
    assembly: Assembly,
    connections: Iterable[UpstreamBase],
    tools: Callable[[str], int | None],
    *,
    started_at: float,
    replica: str | None,
    answered: Mapping[str, bool] | None = None,
    transport: str = "stdio",
) -> Json:
    """One serve as the page shows it."""
    return {
        "pid": os.getpid(),
        "replica": replica,
        "transport": transport,
        "started_at": started_at,
        "updated_at": time.time(),
        "state": assembly.state,
        "upstreams": upstream_rows(connections, tools, answered),
        "providers": provider_rows(assembly),
        "calls": call_rows(assembly.recent.recent(CALLS_SHOWN)),
        "calls_total": assembly.recent.total,
    }


def status_entry(record: Mapping[str, Any]) -> Json:
    """One serve's entry from its status file (cli.serve.StatusFile): the `page` it wrote, or,
    from a file written before the page existed, its upstreams alone."""
    page = record.get("page")
    if isinstance(page, dict):
        return dict(page)
    upstreams = record.get("upstreams") or {}
    return {
        "pid": record.get("pid"),
        "replica": None,
        "transport": "stdio",
        "started_at": record.get("started_at"),
        "updated_at": record.get("updated_at"),
        "state": record.get("state"),
        "upstreams": [upstream_row(name, state, None) for name, state in upstreams.items() if isinstance(state, dict)],
        "providers": [],
        "calls": [],
        "calls_total": 0,
    }


def month_view(month: tally.MonthTally) -> Json:
    """This month's receipt per UTC day, every amount exact."""
    return {
        "month": month.month,
        "calls": month.calls,
        "paid": money(month.paid),
        "rack": money(month.rack),
        "saved": signed(month.saved),
        "days": [
            {
                "day": day.day,
                "calls": day.calls,
                "paid": money(day.paid),
                "rack": money(day.rack),
                "saved": signed(day.saved),
            }
            for day in month.days
        ],
    }


def page_data(
    serves: list[Json],
    month: Json | None,
    replicas: list[Json] | str | None,
    *,
    source: str,
    now: float | None = None,
) -> Json:
    """The whole /ui/data answer. `replicas`: those on the shared Redis, "unreachable" while it
    does not answer, None with the memory backend (one process)."""
    return {
        "schema": SCHEMA,
        "source": source,
        "scope": "all",
        "generated_at": time.time() if now is None else now,
        "serves": serves,
        "month": month,
        "replicas": replicas,
    }


def scoped(page: Json, operator: str) -> Json:
    """`page` as an operator who does not see everything sees it (docs/ui.md, Security): its own
    calls alone, and no month (the ledger's money is every operator's). The upstreams, the
    providers (their spend, p50 and errors are the shared providers', naming no caller) and the
    replicas are the same for everyone."""
    serves = []
    for serve in page["serves"]:
        mine = [call for call in serve.get("calls", []) if call.get("operator", LOCAL) == operator]
        serves.append(serve | {"calls": mine, "calls_total": None})
    return page | {"scope": "operator", "serves": serves, "month": None}


class MonthCache:
    """The month's tally for the chart, kept up to date by reading only what the ledger's files
    gained since the last read (off the event loop, at most every TALLY_EVERY seconds): a poll
    every second costs a read of the new lines, never a re-read of the month. A new month, or a
    file that got shorter (replaced), starts the tally again."""

    def __init__(self, directory: Path | None = None, every: float = TALLY_EVERY) -> None:
        self.directory = directory
        self.every = every
        self._at = float("-inf")
        self._view: Json | None = None
        self._month = ""
        # each file's offset after its last whole line read, and the lines before it
        self._read: dict[Path, tuple[int, int]] = {}
        self._tally: tally.MonthTally | None = None
        self._lock = anyio.Lock()

    async def view(self) -> Json | None:
        """The month's view; None when the ledger is off (FRUGAL_STATS=off) or unreadable."""
        if not ledger.enabled(None):
            return None
        async with self._lock:
            if time.monotonic() - self._at >= self.every:
                try:
                    self._view = month_view(await anyio.to_thread.run_sync(self.catch_up, utc_month(time.time())))
                except (OSError, ValueError):
                    self._view = None  # an unreadable ledger: the chart says so
                self._at = time.monotonic()
            return self._view

    def catch_up(self, month: str) -> tally.MonthTally:
        """The month's tally with every line written since the last call added (in a thread).
        The offsets and the tally move together, once every file is read: a file that cannot be
        read leaves both where they were, to be read again next time. A damaged line is said once
        (a read starts after the last one that was said), numbered in its file."""
        if month != self._month or self._tally is None:
            self._month, self._read, self._tally = month, {}, tally.MonthTally(month)
        read, parts = dict(self._read), [self._tally]
        damages = []
        for path in reader.month_files(month, self.directory):
            start, lines_before = read.get(path, (0, 0))
            damage = reader.Damage(path)
            damages.append(damage)
            pieces = reader.appended(path, tally.Tallied, start, damage, lines_before)
            try:
                for piece in pieces:
                    parts.append(tally.tally(month, [piece.found]))
                    start, lines_before = piece.end, lines_before + piece.lines
            except reader.Replaced:  # replaced by a shorter file: the whole month again
                self._month = ""
                return self.catch_up(month)
            read[path] = (start, lines_before)
        merged = tally.merged(month, parts) if len(parts) > 1 else self._tally
        self._read, self._tally = read, merged
        for damage in damages:
            damage.warn()
        return merged


class LiveSource:
    """`serve --http`'s /ui/data: its own assembly and upstreams, probed at most every
    PROBE_EVERY seconds and only while a page polls (a poll never waits for a probe), and the
    month's tally. A stdio serve's status file is built from one too, probing only while
    `frugal-proxy ui` is being viewed (cli.serve)."""

    def __init__(
        self,
        assembly: Assembly,
        connections: Sequence[UpstreamBase],
        tools: Callable[[str], int | None],
        replica: str | None,
        replicas: Callable[[], Awaitable[list[Json] | str]] | None = None,
        month: MonthCache | None = None,
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        self.task_group = task_group  # where a due probe runs; None: probed within the poll
        self.assembly = assembly
        self.connections = connections
        self.tools = tools
        self.replica = replica
        self.replicas = replicas
        self.month = month or MonthCache()
        self.started = time.time()
        self.answered: dict[str, bool] = {}
        self._due = float("-inf")  # when the next probe is due (monotonic)
        self._misses: dict[str, int] = {}
        self._said: dict[str, bool] = {}  # the verdict last logged per upstream (absent: answering)
        self._probing = False

    @classmethod
    def of(
        cls,
        assembly: Assembly,
        connections: Sequence[UpstreamBase],
        router: Router,
        task_group: anyio.abc.TaskGroup,
        name: str | None = None,
    ) -> LiveSource:
        """A serve's page over its assembly and its router's catalog (the tools each upstream
        listed); on the shared Redis, it starts the assembly's check-in (every few seconds, in
        `task_group`) and lists the replicas it sees. `name`: this replica's otherwise (default:
        the ledger's replica id)."""
        catalog = router.catalog

        def tools(name: str) -> int | None:
            listed = catalog.tool_names(name)
            return None if listed is None else len(listed)

        fleet = assembly.replicas
        if fleet is not None:
            task_group.start_soon(fleet.keep_beating)
        name = fleet.replica if fleet is not None else name or replica_id()
        seen = fleet.seen if fleet is not None else None
        return cls(assembly, connections, tools, name, replicas=seen, task_group=task_group)

    async def probe(self) -> None:
        """Ask each running upstream for an answer (ping or server/discover). One that missed
        MISSES_UNRESPONSIVE probes in a row is unresponsive (one miss may be a ping sent while
        its client's initialize was still on its way); after a miss the next probe comes sooner."""
        self._probing = True
        missed = False
        try:
            found: dict[str, bool] = {}

            async def one(connection: UpstreamBase) -> None:
                nonlocal missed
                if connection.running and connection.era is not None:
                    try:
                        answered = await connection.answers(PROBE_WITHIN, quiet=True)
                    except Exception as error:  # a probe must never take the serve down with it
                        log.debug("status page probe failed", extra={"upstream": connection.name, "error": str(error)})
                        answered = False
                    if answered:
                        self._misses.pop(connection.name, None)
                    else:
                        missed = True
                        self._misses[connection.name] = self._misses.get(connection.name, 0) + 1
                    found[connection.name] = shown = self._misses.get(connection.name, 0) < MISSES_UNRESPONSIVE
                    self._say(connection.name, shown)

            async with anyio.create_task_group() as tg:
                for connection in self.connections:
                    tg.start_soon(one, connection)
            self.answered = found
        finally:
            self._due = time.monotonic() + (PROBE_WITHIN if missed else PROBE_EVERY)
            self._probing = False

    def _say(self, name: str, answering: bool) -> None:
        """Log an upstream's probe verdict when it changes, never once per probe."""
        if self._said.get(name, True) == answering:
            return
        self._said[name] = answering
        if answering:
            log.info("upstream answers its health probes again", extra={"upstream": name})
        else:
            log.warning(
                "upstream did not answer its health probes",
                extra={"upstream": name, "probes": MISSES_UNRESPONSIVE, "seconds": PROBE_WITHIN},
            )

    def unwatched(self) -> None:
        """No page is being viewed: the probes stop, and what they found is forgotten (stale
        by the time a page opens again; the first poll then probes at once)."""
        self.answered, self._misses, self._said = {}, {}, {}
        self._due = float("-inf")

    async def entry(self, transport: str = "http", *, probe: bool = True) -> Json:
        """This serve's entry now (a due probe is started beside it, not awaited). `probe`:
        whether a page is being viewed; without one no upstream is probed (a metered remote
        upstream bills a probe as a call)."""
        if not probe:
            if not self._probing:
                self.unwatched()
        elif not self._probing and time.monotonic() >= self._due:
            if self.task_group is None:
                await self.probe()
            else:
                self._probing = True
                self.task_group.start_soon(self.probe)
        return serve_entry(
            self.assembly,
            self.connections,
            self.tools,
            started_at=self.started,
            replica=self.replica,
            answered=self.answered,
            transport=transport,
        )

    async def data(self) -> Json:
        """The /ui/data answer now."""
        entry = await self.entry()
        replicas = await self.replicas() if self.replicas is not None else None
        return page_data([entry], await self.month.view(), replicas, source="serve")
