"""The measurements, each run over all live columns in interleaved rounds.

Every phase visits the columns round-robin (the order rotates each round), so slow drift in the
machine — another process waking, CPU frequency — lands on every column alike. A column that fails
in a phase gets the error recorded for that phase and sits out the rest of it; the other columns
carry on. Every loop is bounded both in count and in time.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Protocol

import anyio
import msgspec

from columns import ROOT, Column, Upstream
from rpc_client import ClientError, Message, RawClient, connect, monotonic, result_text_bytes

MB = 1_000_000  # decimal, as the issue counts; server-everything refuses lines over 10 MiB
_REPLY_TIMEOUT = 60.0
_PAYLOAD_REPLY_TIMEOUT = 60.0
_MAX_BURST_CALLS = 2_000_000


class Plan(msgspec.Struct, frozen=True):
    """How much of each measurement to do."""

    startup_spawns: int
    warmup_calls: int
    latency_calls: int
    latency_rounds: int
    in_flight: int
    throughput_seconds: float
    throughput_rounds: int
    payload_repeats: dict[int, int]

    @classmethod
    def full(cls) -> Plan:
        return cls(5, 100, 2000, 10, 16, 10.0, 5, {MB: 5, 10 * MB: 3})

    @classmethod
    def quick(cls) -> Plan:
        return cls(3, 20, 200, 4, 16, 2.0, 2, {MB: 2, 10 * MB: 1})


class PayloadFigures(msgspec.Struct):
    """Wall time of tool calls whose result is `size` bytes."""

    size: int
    ms_per_call: float | None = None
    samples_ms: list[float] = msgspec.field(default_factory=list)
    text_bytes: int | None = None  # the result text that came back; below `expected` means altered
    expected_text_bytes: int | None = None


class ColumnFigures(msgspec.Struct):
    """Everything measured for one column on one upstream."""

    column: str
    command: list[str]
    startup_ms: float | None = None
    startup_samples_ms: list[float] = msgspec.field(default_factory=list)
    latency_p50_ms: float | None = None
    latency_p90_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_calls: int = 0
    throughput_per_s: float | None = None
    throughput_calls: int = 0
    throughput_seconds: float = 0.0
    payloads: list[PayloadFigures] = msgspec.field(default_factory=list)
    peak_rss_mb: float | None = None
    rss_of: str = ""
    rss_note: str = ""
    errors: dict[str, str] = msgspec.field(default_factory=dict)


def log(message: str) -> None:
    """A progress line on stderr, so stdout holds only the report."""
    print(message, file=sys.stderr, flush=True)


def brief(message: str, limit: int = 160) -> str:
    """A one-line form of an error message: its first line and, for a traceback, its last."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) == 1:
        return lines[0] if len(lines[0]) <= limit else lines[0][: limit - 3] + "..."
    last = lines[-1][: limit // 2]
    first = lines[0] if len(lines[0]) <= limit - len(last) - 5 else lines[0][: limit - len(last) - 8] + "..."
    return f"{first} ... {last}"


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _load() -> str:
    return f" (load {os.getloadavg()[0]:.2f})"


def rotated(keys: Sequence[str], turn: int) -> list[str]:
    """The keys in the order for round `turn`: each round starts one column later."""
    shift = turn % len(keys) if keys else 0
    return [*keys[shift:], *keys[:shift]]


class Caller(Protocol):
    """What the timed loops need of a connection: stdio (`RawClient`) or HTTP (`HttpClient`)."""

    async def call_tool(self, params: bytes) -> Message: ...


class LatencyPlan(Protocol):
    """How many sequential calls to time."""

    @property
    def warmup_calls(self) -> int: ...
    @property
    def latency_calls(self) -> int: ...
    @property
    def latency_rounds(self) -> int: ...


class ThroughputPlan(Protocol):
    """How long to keep calls in flight."""

    @property
    def throughput_seconds(self) -> float: ...
    @property
    def throughput_rounds(self) -> int: ...


class LatencyFigures(Protocol):
    """Where the latency percentiles go (a column's figures, stdio or HTTP)."""

    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p99_ms: float | None
    latency_calls: int


class Load(msgspec.Struct):
    """Calls completed with calls kept in flight, over how long, and the client's own CPU time."""

    calls: int = 0
    seconds: float = 0.0
    client_cpu_seconds: float = 0.0


async def latency_rounds(
    sessions: Mapping[str, Caller],
    make_params: Callable[[], bytes],
    plan: LatencyPlan,
    figures: Mapping[str, LatencyFigures],
    fail: Callable[[str, ClientError], None],
) -> None:
    """One call at a time, the plan's calls split into interleaved rounds after a warm-up; the
    percentiles go into each column's `figures`.

    A column whose call fails is passed to `fail`, left out of the rest, and gets no percentiles.
    """
    warmup, rounds = plan.warmup_calls, plan.latency_rounds
    per_round = max(1, plan.latency_calls // rounds)
    log(f"  latency: {rounds} rounds x {per_round} sequential calls per column{_load()}")
    samples: dict[str, list[float]] = {k: [] for k in sessions}
    live = list(sessions)
    for turn in range(-1, rounds):
        count = warmup if turn < 0 else per_round
        for key in rotated(live, turn):
            client = sessions[key]
            try:
                for _ in range(count):
                    params = make_params()
                    started = monotonic()
                    await client.call_tool(params)
                    if turn >= 0:
                        samples[key].append((monotonic() - started) * 1000)
            except ClientError as exc:
                fail(key, exc)
                live.remove(key)
    for key in live:
        if samples[key]:
            into = figures[key]
            into.latency_calls = len(samples[key])
            into.latency_p50_ms = percentile(samples[key], 50)
            into.latency_p90_ms = percentile(samples[key], 90)
            into.latency_p99_ms = percentile(samples[key], 99)


async def throughput_rounds(
    sessions: Mapping[str, Caller],
    make_params: Callable[[], bytes],
    in_flight: int,
    plan: ThroughputPlan,
    fail: Callable[[str, ClientError], None],
) -> dict[str, Load]:
    """`in_flight` calls kept outstanding for the plan's seconds per column, in interleaved slices.

    A column whose call fails is passed to `fail` and left out of the rest and of the answer.
    """
    rounds = plan.throughput_rounds
    slice_seconds = plan.throughput_seconds / rounds
    log(f"  throughput: {in_flight} in flight, {rounds} rounds x {slice_seconds:g} s per column{_load()}")
    totals = {k: Load() for k in sessions}
    live = list(sessions)
    for turn in range(rounds):
        for key in rotated(live, turn):
            cpu = time.process_time()
            try:
                done, elapsed = await burst(sessions[key], make_params, slice_seconds, in_flight)
            except ClientError as exc:
                fail(key, exc)
                live.remove(key)
                continue
            load = totals[key]
            load.calls += done
            load.seconds += elapsed
            load.client_cpu_seconds += time.process_time() - cpu
    return {k: totals[k] for k in live}


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Bench:
    """The measurements for one upstream across its columns."""

    def __init__(self, upstream: Upstream, columns: Sequence[Column], plan: Plan) -> None:
        self.upstream = upstream
        self.plan = plan
        self.columns = {c.key: c for c in columns if c.unavailable is None}
        self.figures = {c.key: ColumnFigures(column=c.label, command=c.command(upstream)) for c in columns}
        for column in columns:
            if column.unavailable is not None:
                self.figures[column.key].errors["unavailable"] = column.unavailable
        self._nonces = itertools.count(1)
        self._payload_nonces = itertools.count(0)  # its own count, so sizes move by a few bytes only

    def _fail(self, key: str, exc: BaseException, phase: str) -> None:
        message = _error(exc)
        self.figures[key].errors[phase] = message
        log(f"  ! {self.columns[key].label} {phase}: {brief(message, 300)}")

    def _live(self) -> list[str]:
        return [k for k in self.columns if "startup" not in self.figures[k].errors]

    async def run(self) -> dict[str, ColumnFigures]:
        """Every phase, in order; returns the figures by column key."""
        await self.startup()
        await self.steady_state()
        await self.payloads()
        return self.figures

    async def _open(self, key: str, stack: contextlib.AsyncExitStack, reply_timeout: float) -> RawClient:
        command = self.columns[key].command(self.upstream)
        async with contextlib.AsyncExitStack() as own:
            client = await own.enter_async_context(connect(command, ROOT, reply_timeout))
            await client.handshake()
            await client.request("tools/list")
            stack.push_async_exit(own.pop_all())
        return client

    async def _open_all(
        self, phase: str, stack: contextlib.AsyncExitStack, reply_timeout: float = _REPLY_TIMEOUT
    ) -> dict[str, RawClient]:
        sessions: dict[str, RawClient] = {}
        for key in self._live():
            try:
                sessions[key] = await self._open(key, stack, reply_timeout)
            except ClientError as exc:
                self._fail(key, exc, phase)
        return sessions

    async def startup(self) -> None:
        """Spawn to first `tools/list` reply, the median of a few fresh spawns."""
        log(f"  start-up: {self.plan.startup_spawns} spawns per column")
        samples: dict[str, list[float]] = {k: [] for k in self.columns}
        for turn in range(self.plan.startup_spawns):
            for key in rotated(self._live(), turn):
                command = self.columns[key].command(self.upstream)
                try:
                    started = monotonic()
                    async with connect(command, ROOT, _REPLY_TIMEOUT) as client:
                        await client.handshake()
                        await client.request("tools/list")
                        samples[key].append((monotonic() - started) * 1000)
                except ClientError as exc:
                    self._fail(key, exc, "startup")
        for key, values in samples.items():
            if values:
                self.figures[key].startup_samples_ms = values
                self.figures[key].startup_ms = statistics.median(values)

    async def steady_state(self) -> None:
        """Sequential call latency, then throughput with calls in flight, on long-lived sessions."""
        async with contextlib.AsyncExitStack() as stack:
            sessions = await self._open_all("latency", stack)
            await self._latency(sessions)
            await self._throughput(sessions)

    def _small_call(self) -> bytes:
        return self.upstream.small_call(next(self._nonces))

    async def _latency(self, sessions: dict[str, RawClient]) -> None:
        fail = partial(self._fail, phase="latency")
        await latency_rounds(sessions, self._small_call, self.plan, self.figures, fail)

    async def _throughput(self, sessions: dict[str, RawClient]) -> None:
        live = {k: c for k, c in sessions.items() if "latency" not in self.figures[k].errors}
        fail = partial(self._fail, phase="throughput")
        totals = await throughput_rounds(live, self._small_call, self.plan.in_flight, self.plan, fail)
        for key, load in totals.items():
            if load.seconds > 0:
                figures = self.figures[key]
                figures.throughput_calls = load.calls
                figures.throughput_seconds = load.seconds
                figures.throughput_per_s = load.calls / load.seconds

    async def payloads(self) -> None:
        """Large results on fresh sessions; the peak RSS is taken over the largest size only."""
        sizes = sorted(self.plan.payload_repeats)
        log("  payloads: " + ", ".join(f"{s // MB} MB x{self.plan.payload_repeats[s]}" for s in sizes))
        async with contextlib.AsyncExitStack() as stack:
            sessions = await self._open_all("payload", stack, _PAYLOAD_REPLY_TIMEOUT)
            live = list(sessions)
            for size in sizes:
                if size == sizes[-1]:
                    for key in live:
                        self._start_rss_window(key, sessions[key].pid)
                samples: dict[str, list[float]] = {k: [] for k in live}
                text_bytes: dict[str, tuple[int, int]] = {}  # (returned, expected) for the last call
                for turn in range(self.plan.payload_repeats[size]):
                    for key in rotated(live, turn):
                        params, expected = self.upstream.payload_call(size, next(self._payload_nonces))
                        try:
                            started = monotonic()
                            reply = await sessions[key].call_tool(params)
                            samples[key].append((monotonic() - started) * 1000)
                            text_bytes[key] = (result_text_bytes(reply), expected)
                        except (ClientError, msgspec.DecodeError) as exc:
                            self._fail(key, exc, f"payload {size // MB} MB")
                            live.remove(key)
                for key, values in samples.items():
                    self.figures[key].payloads.append(
                        PayloadFigures(
                            size=size,
                            # A column that failed at this size gets no figure, only its samples.
                            ms_per_call=statistics.median(values) if values and key in live else None,
                            samples_ms=values,
                            text_bytes=text_bytes[key][0] if key in text_bytes else None,
                            expected_text_bytes=text_bytes[key][1] if key in text_bytes else None,
                        )
                    )
                if size == sizes[-1]:
                    for key in live:
                        self._end_rss_window(key, sessions[key].pid)

    def _start_rss_window(self, key: str, pid: int) -> None:
        figures = self.figures[key]
        figures.rss_of = "upstream process" if key == "direct" else "proxy process only"
        if not reset_peak_rss(pid):
            figures.rss_note = "peak since spawn (could not reset VmHWM)"

    def _end_rss_window(self, key: str, pid: int) -> None:
        peak_kib = status_kib(pid, "VmHWM")
        if peak_kib is not None:
            self.figures[key].peak_rss_mb = peak_kib * 1024 / MB


async def burst(client: Caller, make_params: Callable[[], bytes], seconds: float, in_flight: int) -> tuple[int, float]:
    """Keep `in_flight` calls outstanding for `seconds`; returns (calls completed, elapsed seconds)."""
    done = 0
    failure: ClientError | None = None
    deadline = monotonic() + seconds

    async def worker() -> None:
        nonlocal done, failure
        while monotonic() < deadline and done < _MAX_BURST_CALLS and failure is None:
            try:
                await client.call_tool(make_params())
            except ClientError as exc:
                failure = failure or exc
                return
            done += 1

    started = monotonic()
    async with anyio.create_task_group() as task_group:
        for _ in range(in_flight):
            task_group.start_soon(worker)
    elapsed = monotonic() - started
    if failure is not None:
        raise failure
    return done, elapsed


def status_kib(pid: int, field: str) -> int | None:
    """A `kB` field of /proc/<pid>/status, such as VmHWM (peak RSS) or VmRSS."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    return None


def process_parents() -> dict[int, int]:
    """Each live process's parent pid, from /proc/<pid>/stat (the field after the command's `)`)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # it ended meanwhile
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def reset_peak_rss(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux `clear_refs` value 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True
