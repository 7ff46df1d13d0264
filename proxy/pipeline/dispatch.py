"""Dispatch: the one stage that calls providers, and owns failover.

- the candidates are tried in the order the route phase left them, one attempt each;
- just before a provider is called, each policy's `before_call` may still keep it back (a
  budget another call used up, a cooldown another call started): a skip in the trace, and the
  next candidate is tried;
- after each answer, each policy's `after_call` sees it (a 429 starts a cooldown, a reservation
  is settled), and is told when there was none (cancelled);
- an answer ends the chain; so do zero hits from a paid provider (it billed for them);
- an error, or zero hits from a free provider, falls through to the next candidate;
- when every candidate failed, the error names each attempt.

Retries (`limits.retries`, 2 unless set, at most 5): only a free provider of a routed tool is
tried again, and only after a transient error (429, 408, 5xx, a timeout, a reset), after a
jittered backoff of about 0.2 s, then 0.8 s; a paid provider never is (the request may have been
billed), nor a permanent error. A `Retry-After` of at most 5 s is waited for; a longer one fails
over at once. No wait passes the deadline. A provider's retries are one attempt in the receipt.

A routed call has one deadline over its whole chain (`limits.call_timeout`, 60 s unless set):
each attempt gets only what remains, none starts once it has run out, and the call then fails
with `frugal: call deadline exceeded; search failover stopped after N attempt(s): …` naming
each attempt's error. A plain tool keeps its upstream's own deadline. A client that cancels the
call stops the chain at once: nothing further is called or paid.

A paid attempt whose request may have reached its provider and that got no answer saying it
failed (cut by the deadline or a cancel, a timeout or a dropped connection after sending) may have
been billed: its outcome is marked `maybe_billed`, so the policies keep what they reserved for it
and its attempt costs its price (`_billing`). How far a request got is the shared HTTP client's
word, or the upstream connection's for a tool of an upstream (`Exchange.request_state`); a
provider that does not say counts as sent once it was called.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import anyio
import msgspec

from frugal_proxy import money, tracing
from frugal_proxy.config import format_duration
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import Provider
from frugal_proxy.records import Attempt, Decision, Exchange, Outcome, ProviderSpec, billed

RETRIED = frozenset({"transient", "rate_limited"})  # 429, 408, 5xx, timeouts, resets
ANSWERED = frozenset({"ok", "empty"})  # a provider answered: it billed what was reserved
BACKOFF = 0.2  # seconds before the first retry, then 0.8, 3.2 … (each ±25% of jitter)
BACKOFF_FACTOR = 4.0
BACKOFF_MAX = 5.0
RETRY_AFTER_MAX = 5.0  # a longer Retry-After fails over instead of waiting


@dataclass(frozen=True)
class DispatchSettings:
    """`deadline`: seconds over a routed call's whole chain (None: none); `retries`: how often
    a free provider is tried again after a transient error. `clock` (what the deadline is read
    on), `sleep` and `jitter` are seams for tests."""

    deadline: float | None = None
    retries: int = 0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    jitter: Callable[[], float] = random.random


class Dispatch:
    def __init__(
        self, providers: Mapping[tuple[str, str], Provider], policies: Sequence[Policy], settings: DispatchSettings
    ) -> None:
        self.providers = providers  # by (capability, name): a candidate is a spec
        self.settings = settings
        self.clock = settings.clock
        # Only the policies that take part in dispatch are asked, so the others cost nothing here;
        # of those, only the ones that take part in calls of the provider (worked out once each).
        self._before = [p for p in policies if type(p).before_call is not Policy.before_call]
        self._after = [p for p in policies if type(p).after_call is not Policy.after_call]
        self._hooks: dict[tuple[str, str], tuple[list[Policy], list[Policy]]] = {}

    def _hooks_of(self, spec: ProviderSpec) -> tuple[list[Policy], list[Policy]]:
        key = (spec.capability, spec.name)
        hooks = self._hooks.get(key)
        if hooks is None:
            hooks = self._hooks[key] = (
                [p for p in self._before if p.takes_part(spec)],
                [p for p in self._after if p.takes_part(spec)],
            )
        return hooks

    def start(self, exchange: Exchange) -> None:
        """Start a routed call's deadline (a plain tool keeps its upstream's own)."""
        if self.settings.deadline is not None and exchange.route.capability is not None and exchange.deadline is None:
            exchange.deadline = self.clock() + self.settings.deadline

    def expired(self, exchange: Exchange) -> bool:
        return exchange.deadline is not None and self.clock() >= exchange.deadline

    async def run(self, exchange: Exchange) -> None:
        """Try the candidates in order until one answers (see the module docstring)."""
        stopped = False
        empty = None  # the last free provider's empty answer: the answer if nothing better comes
        for spec in exchange.candidates:
            if self.expired(exchange):
                stopped = True
                break
            before, after = self._hooks_of(spec)
            if before and await self._kept_back(exchange, spec, before):
                if self.expired(exchange):  # a reservation waited out the deadline
                    stopped = True
                    break
                continue
            outcome, cut = await self._attempt(exchange, spec, after)
            if self._ends(exchange, spec, outcome):
                return
            if outcome.kind == "empty":
                empty = outcome
            if cut or self.expired(exchange):
                stopped = True
                break
        if stopped:
            within = format_duration(self.settings.deadline or 0)
            why = f"the call deadline ({within}) ran out after {len(exchange.attempts)} attempt(s)"
            exchange.trace.append(Decision("dispatch", "deadline", "stopped", why))
        elif exchange.route.capability and empty is not None:
            exchange.outcome = empty  # a free provider found nothing, the rest failed: an empty answer
            return
        exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(failure(exchange)))

    async def _kept_back(self, exchange: Exchange, spec: ProviderSpec, before: list[Policy]) -> bool:
        for number, policy in enumerate(before):
            try:
                why = await policy.before_call(exchange, spec)
            except BaseException:  # cancelled (or failed) while reserving: give back what the earlier ones reserved
                await self._settle(exchange, spec, None, before[:number])
                raise
            if why is not None:
                exchange.trace.append(
                    Decision("dispatch", policy.name, "skipped", f"skipped {spec.name} ({why})", provider=spec.name)
                )
                await self._settle(exchange, spec, None, before[:number])
                return True
        return False

    async def _attempt(self, exchange: Exchange, spec: ProviderSpec, after: list[Policy]) -> tuple[Outcome, bool]:
        """One attempt, its retries included: the outcome, and whether the deadline cut it short.
        Traced, it is a span of its own (tracing.spans), the parent of the provider's requests."""
        if tracing.live is not None:
            with tracing.attempt_span(spec) as span:
                outcome, cut = await self._attempted(exchange, spec, after)
                if exchange.attempts and exchange.attempts[-1].provider == spec.name:
                    tracing.note_attempt(span, exchange.attempts[-1])
                return outcome, cut
        return await self._attempted(exchange, spec, after)

    async def _attempted(self, exchange: Exchange, spec: ProviderSpec, after: list[Policy]) -> tuple[Outcome, bool]:
        started = time.monotonic()
        retries = 0
        while True:
            outcome, cut = await self._try(exchange, spec, after, started, retries)
            delay = None if cut else self._retry_delay(exchange, spec, outcome, retries)
            if delay is None:
                break
            exchange.trace.append(
                Decision(
                    "dispatch", "retries", "retried", f"retried {spec.name} after {delay:.2f}s ({outcome.message})"
                )
            )
            await self.settings.sleep(delay)
            retries += 1
        self._record(exchange, spec, outcome, started, retries)
        return outcome, cut

    @staticmethod
    def _record(exchange: Exchange, spec: ProviderSpec, outcome: Outcome, started: float, retries: int) -> None:
        """The attempt in the exchange's list, with what it billed (or may have)."""
        charged = billed(outcome)
        free = charged and spec.name in exchange.free_quota  # a unit of its free quota is held
        cost = spec.price_micros if charged and not free else 0
        exchange.attempts.append(
            Attempt(
                provider=spec.name,
                outcome=outcome.kind,
                latency_ms=round((time.monotonic() - started) * 1000, 3),
                cost_micros=cost,
                error=outcome.message or None,
                retries=retries,
                free_quota=free,
                capability=spec.capability,
                maybe_billed=outcome.maybe_billed,
            )
        )

    def alone(self, exchange: Exchange) -> ProviderSpec | None:
        """The one candidate that `run` would call just once, as it is: no deadline, no retry and
        no policy taking part in its calls (a plain tool's one upstream, as a rule). Its caller
        may then call it itself and hand the outcome to `conclude`; None otherwise."""
        if exchange.deadline is not None or exchange.route.capability is not None or len(exchange.candidates) != 1:
            return None
        spec = exchange.candidates[0]
        before, after = self._hooks_of(spec)
        return None if before or after else spec

    def conclude(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome, started: float) -> None:
        """What `run` makes of the outcome of the one candidate `alone` named, called at
        `started` (time.monotonic): the attempt, and the answer or the error naming it. A paid
        one that got no answer after its request went out may have billed (`_billing`)."""
        outcome = self._billing(exchange, spec, outcome, False)
        self._record(exchange, spec, outcome, started, 0)
        if not self._ends(exchange, spec, outcome):
            exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(failure(exchange)))

    def conclude_cancelled(self, exchange: Exchange, spec: ProviderSpec, started: float) -> bool:
        """What `run` makes of the one candidate `alone` named when its caller's call of it,
        sent at `started`, was cancelled: a paid one may have billed (`_billing`), and its attempt
        is recorded; whether it was (then the exchange is to be sealed, with no answer)."""
        lost = self._cancelled(exchange, spec)
        self._record_cancelled(exchange, spec, lost, started, 0)
        return lost.maybe_billed

    @staticmethod
    def _ends(exchange: Exchange, spec: ProviderSpec, outcome: Outcome) -> bool:
        """Take in one candidate's outcome: whether it ends the chain (an answer, or a paid
        provider's empty one: it billed for it)."""
        exchange.outcome = outcome
        if outcome.kind == "ok":
            if outcome.reply is not None:
                exchange.answer = outcome.reply
            return True
        return outcome.kind == "empty" and not spec.free

    def _retry_delay(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome, retries: int) -> float | None:
        """How long to wait before trying the provider again, or None not to (see the module
        docstring): a free provider of a routed tool, a transient error, retries left, a
        Retry-After of at most RETRY_AFTER_MAX, and time left to wait."""
        if (
            outcome.kind not in RETRIED
            or retries >= self.settings.retries
            or not spec.free
            or exchange.route.capability is None
        ):
            return None
        delay = min(BACKOFF * BACKOFF_FACTOR**retries, BACKOFF_MAX) * (0.75 + 0.5 * self.settings.jitter())
        if outcome.retry_after is not None:
            if outcome.retry_after > RETRY_AFTER_MAX:
                return None  # longer than is worth waiting here: fail over (the cooldown fences it)
            delay = max(delay, outcome.retry_after)
        if exchange.deadline is not None and self.clock() + delay >= exchange.deadline:
            exchange.trace.append(
                Decision(
                    "dispatch", "retries", "not retried", f"{spec.name}: a wait of {delay:.2f}s would pass the deadline"
                )
            )
            return None
        return delay

    async def _try(
        self, exchange: Exchange, spec: ProviderSpec, after: list[Policy], started: float, retries: int
    ) -> tuple[Outcome, bool]:
        """One call of the provider, settled with every policy. A paid call cancelled after its
        request may have gone out is recorded as an attempt that may have billed (`_billing`)
        before the cancel goes on; one cancelled before that holds nothing and leaves no attempt."""
        exchange.request_state = None
        try:
            answered = await self._call(exchange, spec)
        except BaseException:  # cancelled (the client, the router's end), or a fault of our own
            lost = self._cancelled(exchange, spec)
            if after:
                with anyio.CancelScope(shield=True):
                    await self._settled(exchange, spec, lost if lost.maybe_billed else None, after)
            self._record_cancelled(exchange, spec, lost, started, retries)
            raise
        cut = answered is None
        if answered is None:
            within = format_duration(self.settings.deadline or 0)
            answered = Outcome("transient", message=f"{spec.name} did not answer within the call deadline ({within})")
        answered = self._billing(exchange, spec, answered, cut)
        if after:
            settled = await self._settle(exchange, spec, answered, after)
            assert settled is not None
            answered = settled
        return answered, cut

    @classmethod
    def _cancelled(cls, exchange: Exchange, spec: ProviderSpec) -> Outcome:
        """The outcome of a call of `spec` that was cancelled: `maybe_billed` when it may have."""
        return cls._billing(exchange, spec, Outcome("transient", message=f"{spec.name} was cancelled"), True)

    @classmethod
    def _record_cancelled(
        cls, exchange: Exchange, spec: ProviderSpec, lost: Outcome, started: float, retries: int
    ) -> None:
        """A cancelled call's attempt, kept only when it may have billed (then it is the call's
        outcome too); one that cannot have billed leaves none."""
        if lost.maybe_billed:
            exchange.outcome = lost
            cls._record(exchange, spec, lost, started, retries)

    @staticmethod
    def _billing(exchange: Exchange, spec: ProviderSpec, outcome: Outcome, cut: bool) -> Outcome:
        """A paid attempt's outcome that is not an answer, marked `maybe_billed` when its request
        may have reached the provider and no answer said it failed: the HTTP client says it went
        out, or the call was cut (deadline, cancel) and the provider does not say how far it got.
        One provably not sent yet (waiting for or opening a connection) or refused with a failure
        status did not bill, nor one the provider said was rate-limited (a rate limit is an
        answer, whatever its status: You.com's `error` and Jina's over-limit text come in a 200)."""
        if spec.free or outcome.kind in ANSWERED or outcome.kind == "rate_limited":
            return outcome
        state = exchange.request_state
        if not (state == "sent" or (state is None and cut)):
            return outcome
        if spec.name in exchange.free_quota:
            what = "may have used a unit of its free monthly quota (counted as used)"
        else:
            what = f"may have been billed ({money.format_usd(spec.price_micros)}, counted as spent)"
        message = f"{outcome.message}; its request had gone out, so it {what}"
        return msgspec.structs.replace(outcome, message=message, maybe_billed=True)

    async def _call(self, exchange: Exchange, spec: ProviderSpec) -> Outcome | None:
        """One call of the provider with what remains of the deadline; None when it ran out."""
        provider = self.providers[(spec.capability, spec.name)]
        if exchange.deadline is None:
            return await provider.call(exchange)
        with anyio.move_on_after(exchange.deadline - self.clock()):
            return await provider.call(exchange)
        return None

    @staticmethod
    async def _settle(
        exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None, policies: Sequence[Policy]
    ) -> Outcome | None:
        """Each policy's after_call, in order, each seeing what the one before made of the answer;
        shielded when one of them gives back a reservation (`Policy.reserves`: the provider did
        not answer), so that a cancelled call still releases what it reserved (an answer, or
        policies that reserve nothing, need no cancel scope)."""
        if billed(outcome) or not any(policy.reserves for policy in policies):
            outcome = await Dispatch._settled(exchange, spec, outcome, policies, shielded=False)
            return outcome
        with anyio.CancelScope(shield=True):
            outcome = await Dispatch._settled(exchange, spec, outcome, policies)
        return outcome

    @staticmethod
    async def _settled(
        exchange: Exchange,
        spec: ProviderSpec,
        outcome: Outcome | None,
        policies: Sequence[Policy],
        shielded: bool = True,
    ) -> Outcome | None:
        for number, policy in enumerate(policies):
            if not shielded and policy.reserves and outcome is not None and not billed(outcome):
                return await Dispatch._settle(exchange, spec, outcome, policies[number:])  # no longer an answer
            replaced = await policy.after_call(exchange, spec, outcome)
            if replaced is not None and outcome is not None:
                outcome = replaced
        return outcome


def failure(exchange: Exchange) -> str:
    """The error of a call no provider answered: a guard's refusal, the skips, or every attempt."""
    tool = exchange.call.tool
    failures = [(a.provider, a.error or a.outcome) for a in exchange.attempts]
    if any(d.policy == "deadline" and d.verdict == "stopped" for d in exchange.trace):
        capability = exchange.route.capability or "tool"
        attempts = f"{capability} failover stopped after {len(failures)} attempt(s)"
        return f"frugal: call deadline exceeded; {attempts}" + (f": {tried(failures)}" if failures else skips(exchange))
    if not failures:
        # A guard that refused the call says why and what to do; otherwise list the skips.
        refusal = next((d for d in exchange.trace if d.verdict == "refused"), None)
        if refusal is not None:
            return f"{tool}: {refusal.policy}: {refusal.detail}"
        return f"{tool} failed: no provider is available for this tool{skips(exchange)}"
    if len(failures) == 1 and exchange.route.capability is None:
        return f"{tool} failed: {failures[0][1]}"
    return f"{tool} failed on every provider ({len(failures)} attempt(s)): {tried(failures)}"


def skips(exchange: Exchange) -> str:
    """The providers the guards skipped and why, in parentheses; "" when none was."""
    skipped = [f"{d.policy}: {d.detail}" for d in exchange.trace if d.verdict == "skipped" and d.provider]
    return f" ({'; '.join(skipped)})" if skipped else ""


def tried(failures: list[tuple[str, str]]) -> str:
    # A provider's message names it already ("serper is rate-limiting (429)"); others get the name.
    return "; ".join(message if message.startswith(name) else f"{name}: {message}" for name, message in failures)
