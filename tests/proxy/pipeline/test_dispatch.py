"""Dispatch's hooks around each provider: a policy keeping one back just before it is called,
every after_call told of each answer (or of none), an outcome replaced, and a client that
cancels mid-chain: nothing further is called and what was reserved is settled. Then the
deadline over a routed call's chain, on a fake clock. Last, what a paid call cut on its way
costs: Serper's driver, over the shared HTTP client, against a loopback Serper slower than the
call's deadline (tests/servers/slow_serper.py): once its request may have reached the provider, a
call cut by the deadline or cancelled keeps its reservation as spend (the daily cap counts it),
and its attempt, receipt and ledger line say it may have been billed; a call cut while it was
still connecting, and a failure status, cost $0."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import httpx2
import pytest

from frugal_proxy.capabilities import ExtractRequest, SearchHit
from frugal_proxy.config import ProviderConfig
from frugal_proxy.ledger.line import UsageLine
from frugal_proxy.pipeline.dispatch import DispatchSettings
from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
from frugal_proxy.policies import Policy
from frugal_proxy.policies.budget import Budget
from frugal_proxy.policies.ledger import Ledger
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers import FakeProvider
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.providers.jina import Jina
from frugal_proxy.providers.marginalia import Marginalia
from frugal_proxy.providers.registry import Setup
from frugal_proxy.providers.serper import Serper
from frugal_proxy.providers.youcom import Youcom
from frugal_proxy.records import Call, Decision, Exchange, Outcome, ProviderSpec, Route
from frugal_proxy.state.spend import MemorySpend, spend_key
from tests.fake_clock import Clock
from tests.pace import deadline, paced
from tests.routed_calls import error_text
from tests.routed_calls import search as routed
from tests.servers.slow_serper import SlowSerper, slow_serper, unopened_port

pytestmark = pytest.mark.anyio


async def fails(ex: Exchange) -> Outcome:
    return Outcome("transient", message="503")


async def answers(ex: Exchange) -> Outcome:
    return Outcome("ok", data=[SearchHit("t", "https://a.example/", "s", "x")])


class Recorder(Policy):
    """Keeps back the providers named in `refuse`; notes every hook call."""

    name = "recorder"

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse = refuse
        self.seen: list[tuple[str, str, str | None]] = []

    async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
        self.seen.append(("before", spec.name, None))
        return "not now" if spec.name in self.refuse else None

    async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
        self.seen.append(("after", spec.name, outcome.kind if outcome else None))
        return None


async def test_a_provider_kept_back_is_a_skip_and_earlier_policies_are_settled() -> None:
    first, second = Recorder(), Recorder(refuse=("a",))
    pipeline = build_pipeline(
        {"a": FakeProvider("a", answers, capability="search"), "b": FakeProvider("b", answers, capability="search")},
        [first, second],
    )
    ex = routed("a", "b")
    with deadline(5):
        await pipeline.run(ex)
    assert [a.provider for a in ex.attempts] == ["b"]
    assert Decision("dispatch", "recorder", "skipped", "skipped a (not now)", provider="a") in ex.trace
    # the first policy passed `a`, so it hears that `a` was not called after all
    assert first.seen == [("before", "a", None), ("after", "a", None), ("before", "b", None), ("after", "b", "ok")]


async def test_after_call_may_replace_the_outcome() -> None:
    class Empties(Policy):
        async def after_call(self, exchange: Exchange, spec: ProviderSpec, outcome: Outcome | None) -> Outcome | None:
            return Outcome("empty", message="filtered") if spec.name == "a" else None

    a, b = FakeProvider("a", answers, capability="search"), FakeProvider("b", answers, capability="search")
    ex = routed("a", "b")
    with deadline(5):
        await build_pipeline({"a": a, "b": b}, [Empties()]).run(ex)
    assert [(at.provider, at.outcome) for at in ex.attempts] == [("a", "empty"), ("b", "ok")]


async def test_a_client_cancelling_mid_chain_stops_it_and_settles_the_call_in_flight() -> None:
    started = anyio.Event()

    async def hangs(ex: Exchange) -> Outcome:
        started.set()
        await anyio.Event().wait()
        raise AssertionError("not reached")

    recorder = Recorder()
    third = FakeProvider("c", answers, capability="search")
    pipeline = build_pipeline(
        {
            "a": FakeProvider("a", fails, capability="search"),
            "b": FakeProvider("b", hangs, capability="search"),
            "c": third,
        },
        [recorder],
    )
    ex = routed("a", "b", "c")
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipeline.run, ex)
            await started.wait()
            tg.cancel_scope.cancel()  # what the router does when the client cancels the request
    assert third.calls == [] and ex.answer is None
    assert recorder.seen[-1] == ("after", "b", None)
    assert [a.provider for a in ex.attempts] == ["a"]


async def test_a_call_cancelled_while_a_later_policy_reserves_settles_the_earlier_ones() -> None:
    """A reservation may wait (a shared store, the ledger being read): a client that cancels the
    call there still has what the earlier policies reserved for it given back, so nothing leaks."""
    waiting = anyio.Event()

    class Slow(Recorder):
        reserves = True

        async def before_call(self, exchange: Exchange, spec: ProviderSpec) -> str | None:
            waiting.set()
            await anyio.Event().wait()  # a reservation that never comes back in time
            raise AssertionError("not reached")

    first = Recorder()
    first.reserves = True
    provider = FakeProvider("a", answers, capability="search")
    pipeline = build_pipeline({"a": provider}, [first, Slow()])
    ex = routed("a")
    with deadline(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipeline.run, ex)
            await waiting.wait()
            tg.cancel_scope.cancel()  # the client cancels the request
    assert provider.calls == []
    assert first.seen == [("before", "a", None), ("after", "a", None)]  # it heard that `a` was not called


# -- the deadline ---------------------------------------------------------------------------------


def taking(name: str, clock: Clock, seconds: float, outcome: Outcome) -> FakeProvider:
    """A provider that takes `seconds` of the fake clock to answer."""

    async def answer(ex: Exchange) -> Outcome:
        clock.now += seconds
        return outcome

    return FakeProvider(name, answer, capability="search")


async def test_no_provider_is_called_once_the_deadline_ran_out() -> None:
    clock = Clock()
    busy = Outcome("rate_limited", message="marginalia is rate-limiting (429)")
    providers = {
        "marginalia": taking("marginalia", clock, 25, busy),
        "wikipedia": taking("wikipedia", clock, 40, Outcome("transient", message="wikipedia failed (503)")),
        "serper": taking("serper", clock, 1, Outcome("ok", data=[])),
    }
    pipeline = build_pipeline(providers, settings=DispatchSettings(deadline=60.0, clock=clock))
    ex = routed("marginalia", "wikipedia", "serper")
    with deadline(5):
        answer = await pipeline.run(ex)
    assert providers["serper"].calls == []
    body = jsonrpc.decode_any(answer["result"])
    assert body["isError"] is True
    assert body["content"][0]["text"] == (
        "frugal: call deadline exceeded; search failover stopped after 2 attempt(s): "
        "marginalia is rate-limiting (429); wikipedia failed (503)"
    )
    assert ex.trace[-1] == Decision(
        "dispatch", "deadline", "stopped", "the call deadline (1m0s) ran out after 2 attempt(s)"
    )


async def test_an_attempt_gets_only_what_remains_and_is_cut_there() -> None:
    clock = Clock()
    hanging = anyio.Event()

    async def hangs(ex: Exchange) -> Outcome:
        await hanging.wait()
        raise AssertionError("not reached")

    recorder = Recorder()
    providers = {
        "slow": taking("slow", clock, 59.95, Outcome("transient", message="slow failed (502)")),
        "hangs": FakeProvider("hangs", hangs, capability="search"),
        "never": FakeProvider("never", answers, capability="search"),
    }
    pipeline = build_pipeline(providers, [recorder], DispatchSettings(deadline=60.0, clock=clock))
    ex = routed("slow", "hangs", "never")
    with deadline(5):  # "hangs" is cut after the 50 ms that were left (real time)
        answer = await pipeline.run(ex)
    assert providers["never"].calls == []
    assert jsonrpc.decode_any(answer["result"])["content"][0]["text"] == (
        "frugal: call deadline exceeded; search failover stopped after 2 attempt(s): "
        "slow failed (502); hangs did not answer within the call deadline (1m0s)"
    )
    assert ("after", "hangs", "transient") in recorder.seen  # settled: a reservation is given back


async def test_a_plain_tool_keeps_its_own_deadline() -> None:
    clock = Clock()
    plain = taking("notes", clock, 3600, Outcome("ok", reply=jsonrpc.result(None, {"content": []})))
    pipeline = build_pipeline({"notes": plain}, settings=DispatchSettings(deadline=60.0, clock=clock))
    ex = Exchange(Call(1, "add", {}), Route("add", ("notes",)))
    with deadline(5):
        await pipeline.run(ex)
    assert ex.deadline is None and ex.attempts[0].outcome == "ok"


# -- retries --------------------------------------------------------------------------------------


class Sleeps:
    """anyio.sleep on the fake clock: notes each wait and moves the clock by it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.now += seconds


def scripted(
    name: str, *outcomes: Outcome, price: int = 0, clock: Clock | None = None, takes: float = 0
) -> FakeProvider:
    """A provider that answers with `outcomes` in turn (the last one from then on)."""
    left = list(outcomes)

    async def answer(ex: Exchange) -> Outcome:
        if clock is not None:
            clock.now += takes
        return left.pop(0) if len(left) > 1 else left[0]

    return FakeProvider(name, answer, price, capability="search")


def retrying(
    providers: dict[str, FakeProvider], clock: Clock, retries: int = 2, deadline: float | None = 60.0
) -> tuple[Pipeline, Sleeps]:
    sleeps = Sleeps(clock)
    settings = DispatchSettings(deadline=deadline, retries=retries, clock=clock, sleep=sleeps, jitter=lambda: 0.5)
    return build_pipeline(providers, settings=settings), sleeps


FAILED = Outcome("transient", message="wiki failed (503)")
OK = Outcome("ok", data=[SearchHit("t", "https://a.example/", "s", "wiki")])


async def test_a_free_provider_retries_a_transient_error_with_backoff_as_one_attempt() -> None:
    clock = Clock()
    pipeline, sleeps = retrying({"wiki": scripted("wiki", FAILED, FAILED, OK)}, clock)
    ex = routed("wiki")
    with deadline(5):
        answer = await pipeline.run(ex)
    assert sleeps.waits == [0.2, 0.8]
    (attempt,) = ex.attempts
    assert (attempt.provider, attempt.outcome, attempt.retries) == ("wiki", "ok", 2)
    body = jsonrpc.decode_any(answer["result"])["structuredContent"]
    assert body["attempts"][0]["retries"] == 2 and body["attempts"][0]["outcome"] == "won"


async def test_the_backoff_is_jittered_and_retries_run_out() -> None:
    clock = Clock()
    sleeps = Sleeps(clock)
    settings = DispatchSettings(retries=2, clock=clock, sleep=sleeps, jitter=lambda: 1.0)
    ex = routed("wiki")
    with deadline(5):
        await build_pipeline({"wiki": scripted("wiki", FAILED)}, settings=settings).run(ex)
    assert sleeps.waits == [0.25, 1.0]  # +25% each
    assert ex.attempts[0].retries == 2 and ex.attempts[0].outcome == "transient"


async def test_paid_providers_permanent_errors_and_plain_tools_never_retry() -> None:
    clock = Clock()
    refused = Outcome("permanent", message="free refused the key (401): check it")
    providers = {
        "paid": scripted("paid", FAILED, OK, price=1_000),
        "refuses": scripted("refuses", refused, OK),
        "last": scripted("last", OK),
    }
    pipeline, sleeps = retrying(providers, clock)
    ex = routed("paid", "refuses", "last")
    with deadline(5):
        await pipeline.run(ex)
    assert sleeps.waits == [] and [(a.provider, a.retries) for a in ex.attempts] == [
        ("paid", 0),
        ("refuses", 0),
        ("last", 0),
    ]
    plain = Exchange(Call(1, "add", {}), Route("add", ("notes",)))
    plain_pipeline, plain_sleeps = retrying({"notes": scripted("notes", FAILED, OK)}, clock)
    with deadline(5):
        await plain_pipeline.run(plain)
    assert plain_sleeps.waits == [] and plain.attempts[0].outcome == "transient"


async def test_retries_zero_turns_them_off() -> None:
    clock = Clock()
    pipeline, sleeps = retrying({"wiki": scripted("wiki", FAILED, OK)}, clock, retries=0)
    ex = routed("wiki")
    with deadline(5):
        await pipeline.run(ex)
    assert sleeps.waits == [] and ex.attempts[0].outcome == "transient"


@pytest.mark.parametrize(("retry_after", "waits", "served_by"), [(5.0, [5.0], "wiki"), (6.0, [], "next")])
async def test_a_retry_after_of_5s_is_waited_for_and_6s_fails_over(
    retry_after: float, waits: list[float], served_by: str
) -> None:
    clock = Clock()
    busy = Outcome("rate_limited", message="wiki is rate-limiting (429)", retry_after=retry_after)
    pipeline, sleeps = retrying({"wiki": scripted("wiki", busy, OK), "next": scripted("next", OK)}, clock)
    ex = routed("wiki", "next")
    with deadline(5):
        await pipeline.run(ex)
    assert sleeps.waits == waits
    assert ex.attempts[-1].provider == served_by and ex.attempts[-1].outcome == "ok"


async def test_a_retry_never_sleeps_past_the_deadline() -> None:
    """The deadline would run out during the second backoff (0.8 s with 0.5 s left): that wait is
    not slept, the provider fails over, and the next one gets the time that is left."""
    clock = Clock()
    providers = {"wiki": scripted("wiki", FAILED, clock=clock, takes=0.25), "next": scripted("next", OK)}
    pipeline, sleeps = retrying(providers, clock, deadline=1.2)
    ex = routed("wiki", "next")
    with deadline(5):
        await pipeline.run(ex)
    assert sleeps.waits == [0.2]  # 0.25 + 0.2 + 0.25 = 0.7 s gone: 0.8 s more would pass 1.2 s
    assert [(a.provider, a.retries) for a in ex.attempts] == [("wiki", 1), ("next", 0)]
    assert Decision("dispatch", "retries", "not retried", "wiki: a wait of 0.80s would pass the deadline") in ex.trace
    assert clock.now - 1_000_000.0 < 1.2


# -- what a paid call cut on its way costs ------------------------------------------------------

SERPER = spend_key("search", "serper")
PRICE = 1_000  # serper's list price, $0.001
DEADLINE = 1.0


@pytest.fixture
def serper_api() -> Iterator[SlowSerper]:
    with slow_serper() as running:
        yield running


class Rig:
    """Serper's driver at `base_url` under a daily cap of `cap`, the budget and the ledger (its
    lines in `lines`), dispatch's deadline DEADLINE."""

    def __init__(self, base_url: str, cap: int, timeout: float = 20.0) -> None:
        self.http = HttpClient()
        spec = ProviderSpec("serper", "search", PRICE)
        setup = Setup(spec, base_url, "sk-test", timeout, self.http, ProviderConfig(), {})
        self.budget = Budget({SERPER: cap}, MemorySpend(time.time))
        self.lines: list[UsageLine] = []

        async def found(ex: Exchange) -> Outcome:
            return Outcome("ok", data=[SearchHit("MCP", "https://modelcontextprotocol.io/", "s", "wikipedia")])

        providers = {"serper": Serper(setup), "wikipedia": FakeProvider("wikipedia", found, capability="search")}
        self.pipeline: Pipeline = build_pipeline(
            providers, [self.budget, Ledger(self.lines)], DispatchSettings(deadline=DEADLINE)
        )

    @property
    def spent(self) -> int:
        return self.budget.book.spent(SERPER)

    async def warm(self, base_url: str) -> None:
        """Open the client's pooled connection to `base_url` (a quick 404): the calls under test
        then find it open, so a slow connect under a loaded machine cannot read as "unsent"."""
        with deadline(30):
            await self.http.send("GET", base_url + "/warm", request_timeout=paced(30))


async def test_a_call_cut_by_the_deadline_after_its_request_went_out_counts_against_the_cap(
    serper_api: SlowSerper,
) -> None:
    rig = Rig(serper_api.base, cap=2 * PRICE)
    await rig.warm(serper_api.base)
    calls = [routed("serper") for _ in range(3)]
    with deadline(10):
        answers = [await rig.pipeline.run(ex) for ex in calls]
    await rig.http.close()
    assert serper_api.requests == 2  # the third call found the cap reached by the two cut ones
    assert rig.spent == 2 * PRICE
    first = calls[0]
    assert first.receipt is not None and first.receipt.total_micros == PRICE
    (attempt,) = first.attempts
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("transient", PRICE, True)
    assert error_text(answers[0]) == (
        "frugal: call deadline exceeded; search failover stopped after 1 attempt(s): serper did not answer "
        "within the call deadline (1s); its request had gone out, so it may have been billed "
        "($0.0010, counted as spent)"
    )
    assert "budget: skipped serper (it has spent $0.0020 of its $0.0020 daily budget" in error_text(answers[2])
    line = rig.lines[0]
    assert (line.outcome, line.total_cost_usd, line.maybe_billed_usd, line.billed) == (
        "transient",
        0.001,
        0.001,
        {"serper": 0.001},
    )
    assert rig.lines[2].total_cost_usd == 0 and rig.lines[2].maybe_billed_usd == 0


async def test_a_call_cancelled_after_its_request_went_out_counts_and_has_its_ledger_line(
    serper_api: SlowSerper,
) -> None:
    rig = Rig(serper_api.base, cap=PRICE)
    ex = routed("serper")
    with deadline(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.pipeline.run, ex)
            await anyio.to_thread.run_sync(serper_api.received.wait, 5)
            tg.cancel_scope.cancel()  # what the router does when the client cancels the request
        after = routed("serper")
        refused = await rig.pipeline.run(after)
    await rig.http.close()
    assert rig.spent == PRICE and serper_api.requests == 1
    (attempt,) = ex.attempts
    assert attempt.maybe_billed and attempt.cost_micros == PRICE
    assert attempt.error == (
        "serper was cancelled; its request had gone out, so it may have been billed ($0.0010, counted as spent)"
    )
    assert [(line.provider, line.maybe_billed_usd, line.billed) for line in rig.lines] == [
        ("serper", 0.001, {"serper": 0.001}),  # the cancelled call, sealed as it was cancelled
        (None, 0.0, {}),
    ]
    assert "budget: skipped serper" in error_text(refused)


async def test_a_paid_request_that_timed_out_fails_over_and_its_receipt_says_it_may_have_billed(
    serper_api: SlowSerper,
) -> None:
    """Serper's own read timeout, shorter than the deadline: no answer came for a request that
    went out, so the next provider answers and the receipt shows the first attempt's price."""
    rig = Rig(serper_api.base, cap=PRICE, timeout=0.1)
    await rig.warm(serper_api.base)
    ex = routed("serper", "wikipedia")
    with deadline(10):
        answer = await rig.pipeline.run(ex)
    await rig.http.close()
    body = jsonrpc.decode_any(answer["result"])["structuredContent"]
    first, second = body["attempts"]
    assert (first["provider"], first["cost_usd"], first["maybe_billed"]) == ("serper", 0.001, True)
    assert first["error"] == (
        "serper did not answer in time (ReadTimeout); its request had gone out, so it may have been billed "
        "($0.0010, counted as spent)"
    )
    assert second["provider"] == "wikipedia" and "maybe_billed" not in second
    assert (body["provider_used"], body["cost_usd"], body["total_cost_usd"]) == ("wikipedia", 0, 0.001)
    assert rig.spent == PRICE and rig.lines[0].maybe_billed_usd == 0.001


@pytest.mark.parametrize("cancelled", [False, True])
async def test_a_call_cut_while_it_was_still_connecting_costs_nothing(cancelled: bool) -> None:
    with unopened_port() as base:
        rig = Rig(base, cap=PRICE)
        ex = routed("serper")
        with deadline(10):
            if cancelled:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(rig.pipeline.run, ex)
                    await anyio.sleep(0.2)  # connecting: the port takes no connection
                    tg.cancel_scope.cancel()
            else:
                await rig.pipeline.run(ex)
        await rig.http.close()
    assert rig.spent == 0
    assert all(not a.maybe_billed and a.cost_micros == 0 for a in ex.attempts)
    assert len(ex.attempts) == (0 if cancelled else 1)
    assert [line.total_cost_usd for line in rig.lines] == ([] if cancelled else [0.0])


async def test_a_failure_status_costs_nothing() -> None:
    from tests.servers.fake_apis import fake_apis

    with fake_apis() as apis:
        rig = Rig(apis.base + "/down", cap=PRICE)  # 503 for every request
        ex = routed("serper")
        with deadline(10):
            await rig.pipeline.run(ex)
        await rig.http.close()
    (attempt,) = ex.attempts
    assert (attempt.error, attempt.cost_micros, attempt.maybe_billed) == ("serper failed (503)", 0, False)
    assert rig.spent == 0 and ex.request_state == "refused"


@pytest.mark.parametrize(
    ("provider", "answer"),
    [
        ("youcom", httpx2.Response(200, json={"error": "Rate limit exceeded: too many requests"})),
        ("jina", httpx2.Response(200, text="Whoa there, turbo! You've hit the rate limit. Slow down.")),
    ],
)
async def test_a_rate_limit_said_in_a_success_status_costs_nothing(provider: str, answer: httpx2.Response) -> None:
    """A request that went out and came back a 200 saying the API is rate-limiting it (You.com's
    `error`, Jina's "Whoa there, turbo!") was refused, not billed: its reservation is given back."""
    http = HttpClient(httpx2.MockTransport(lambda request: answer))
    capability = "search" if provider == "youcom" else "extract"
    spec = ProviderSpec(provider, capability, PRICE)
    setup = Setup(spec, "https://api.example", "sk-test", 5.0, http, ProviderConfig(), {})
    driver = Youcom(setup) if provider == "youcom" else Jina(setup)
    key = spend_key(capability, provider)
    budget = Budget({key: PRICE}, MemorySpend(time.time))
    pipeline = build_pipeline({provider: driver}, [budget], DispatchSettings(deadline=DEADLINE))
    ex = routed(provider)
    if provider == "jina":
        ex.route = Route("frugal__extract", (provider,), capability="extract")
        ex.request = ExtractRequest("https://example.org/")
    with deadline(10):
        await pipeline.run(ex)
    await http.close()
    (attempt,) = ex.attempts
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("rate_limited", 0, False)
    assert budget.book.spent(key) == 0


async def test_a_call_cancelled_while_it_waited_for_a_slot_of_its_driver_costs_nothing() -> None:
    """Marginalia sends two requests at a time; a priced call cancelled while it waited for one
    of those slots never went out: its reservation is given back and it leaves no attempt. The
    two in flight, whose requests went out and never came back, may have billed. (The cancel
    comes once both requests are in, so nothing here depends on how fast the loop runs.)"""
    released = anyio.Event()
    both_in = anyio.Event()
    arrived = 0

    async def never_answers(request: httpx2.Request) -> httpx2.Response:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both_in.set()
        await released.wait()
        return httpx2.Response(200, json={"results": []})

    http = HttpClient(httpx2.MockTransport(never_answers))
    spec = ProviderSpec("marginalia", "search", PRICE)
    setup = Setup(spec, "https://api.example", "key", 5.0, http, ProviderConfig(), {})
    key = spend_key("search", "marginalia")
    budget = Budget({key: 3 * PRICE}, MemorySpend(time.time))
    pipeline = build_pipeline({"marginalia": Marginalia(setup)}, [budget], DispatchSettings(deadline=60.0))
    calls = [routed("marginalia") for _ in range(3)]
    with deadline(10):
        async with anyio.create_task_group() as tg:
            for ex in calls:
                tg.start_soon(pipeline.run, ex)
            await both_in.wait()
            tg.cancel_scope.cancel()
    released.set()
    await http.close()
    assert arrived == 2
    billed = sorted((a.maybe_billed, a.cost_micros) for ex in calls for a in ex.attempts)
    assert billed == [(True, PRICE), (True, PRICE)]
    assert budget.book.spent(key) == 2 * PRICE
