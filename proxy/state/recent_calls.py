"""What the status page shows of the calls this process served, in memory and bounded.

    CallRecord     one finished tools/call: tool, capability, provider used, outcome, cost,
                   latency, the bytes the governor cut, each attempt, its operator; never the
                   arguments or the result's text
    AttemptRecord  one provider tried within it: provider, outcome, latency, cost, retries
    RecentCalls    the last MAX_CALLS records (a ring), each provider's last MAX_SAMPLES
                   answered latencies (every outcome not in FAILED, `empty` too: for a
                   p50) and the times of its failed attempts in the last ERROR_WINDOW seconds

Per process, by choice (a replica's page shows its own calls; the ledger has everyone's). Fed
from the pipeline's seal phase (policies.recent_calls) on the event loop's one thread, read by
the page's data builder on the same thread: no lock. Every container is bounded, so a long run
holds at most MAX_CALLS records and, per provider, MAX_SAMPLES latencies and MAX_ERRORS times.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

import msgspec

MAX_CALLS = 100
MAX_SAMPLES = 64
MAX_ERRORS = 512
MAX_PROVIDERS = 256  # distinct providers a book keeps figures for (the configured ones are far fewer)
ERROR_WINDOW = 15 * 60.0  # seconds: "errors in the last 15 minutes"
# Attempt outcomes that are the provider's fault: an `empty` answer is an answer.
FAILED = frozenset({"transient", "rate_limited", "permanent"})


class AttemptRecord(msgspec.Struct, frozen=True, gc=False):
    provider: str
    outcome: str
    latency_ms: float
    cost_micros: int = 0
    retries: int = 0
    free_quota: bool = False


class CallRecord(msgspec.Struct, frozen=True, gc=False):
    at: float  # epoch seconds (time.time) the call was sealed
    tool: str
    capability: str | None
    provider: str | None  # the provider that served it (None: none did)
    outcome: str  # policies.metrics' outcome label, or `cached`
    cost_micros: int  # what every attempt billed together
    latency_ms: float
    cut_bytes: int  # what the size governor took out of the result (0: nothing)
    attempts: tuple[AttemptRecord, ...] = ()
    operator: str = "local"  # whose call it was (the bearer token's operator; `local` without auth)
    number: int = 0  # its place among the calls this process recorded (1 the first): a stable id


class RecentCalls:
    """The ring of the last calls and each provider's recent latencies and failures."""

    def __init__(self, clock: Callable[[], float] = time.time, max_calls: int = MAX_CALLS) -> None:
        self.clock = clock
        self.calls: deque[CallRecord] = deque(maxlen=max_calls)
        self.total = 0  # calls recorded since start (the ring keeps the last max_calls)
        self._latencies: dict[str, deque[float]] = {}
        self._errors: dict[str, deque[float]] = {}

    def add(self, record: CallRecord) -> None:
        """One finished call, and what each of its attempts says of its provider."""
        self.total += 1
        if record.number != self.total:  # the policy numbers its records itself: no copy per call
            record = msgspec.structs.replace(record, number=self.total)
        self.calls.append(record)
        for attempt in record.attempts:
            if attempt.outcome in FAILED:
                times = self._book(self._errors, attempt.provider, MAX_ERRORS)
                if times is not None:
                    times.append(record.at)
            else:  # an answer (`ok` or `empty`): the provider's latency, whatever it found
                samples = self._book(self._latencies, attempt.provider, MAX_SAMPLES)
                if samples is not None:
                    samples.append(attempt.latency_ms)

    @staticmethod
    def _book(books: dict[str, deque[float]], provider: str, size: int) -> deque[float] | None:
        book = books.get(provider)
        if book is None:
            if len(books) >= MAX_PROVIDERS:
                return None
            book = books[provider] = deque(maxlen=size)
        return book

    def recent(self, limit: int = MAX_CALLS) -> list[CallRecord]:
        """The last `limit` calls, newest first."""
        calls = list(self.calls)
        calls.reverse()
        return calls[:limit]

    def p50_ms(self, provider: str) -> float | None:
        """The median latency of the provider's last answered attempts (None: none yet)."""
        samples = self._latencies.get(provider)
        return statistics.median(samples) if samples else None

    def errors(self, provider: str, window: float = ERROR_WINDOW) -> int:
        """Failed attempts of the provider in the last `window` seconds."""
        times = self._errors.get(provider)
        if not times:
            return 0
        since = self.clock() - window
        while times and times[0] < since:
            times.popleft()
        return len(times)
