"""A plain tools/call (router.plain): sent from the client's reader, answered from the
upstream's reader, and every rule of a call kept; through the router, against real upstreams."""

from __future__ import annotations

import gc
import logging
import sys
from typing import Any

import anyio
import pytest

from frugal_proxy.pipeline.assembly import Assembly
from frugal_proxy.policies import Policy
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Exchange
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import FAULTY_SERVER, notes_command
from tests.pace import deadline, paced
from tests.proxy.router.test_router import Recorder, result, served

pytestmark = pytest.mark.anyio


async def test_a_failing_answer_on_the_upstreams_reader_is_that_calls_alone(caplog: pytest.LogCaptureFixture) -> None:
    """A plain call is answered from the upstream's reader (`on_settled`): when answering one
    fails, that is logged for that call, and the reader goes on to answer the next."""
    answered: list[Any] = []
    second_answered = anyio.Event()

    async def failing(pending: Any) -> None:
        raise OSError("the client's pipe broke")

    async def fine(pending: Any) -> None:
        answered.append(pending.reply)
        second_answered.set()

    params = {"name": jsonrpc.raw("add"), "arguments": jsonrpc.raw({"a": 2, "b": 3})}
    with deadline(30), caplog.at_level(logging.WARNING, "frugal_proxy.upstream"):
        async with UpstreamConnection(notes_command(), name="notes") as upstream:
            await upstream.ensure_ready()
            first = upstream.start_request("tools/call", params, failing)
            assert first is not None
            await first.wait()
            second = upstream.start_request("tools/call", params, fine)
            assert second is not None
            await second_answered.wait()
            await upstream.shutdown()
    assert "result" in answered[0] or "error" in answered[0]  # the second call got its answer
    assert "answering a call from the upstream's reader failed" in caplog.text
    assert any(getattr(r, "error", "") == "OSError: the client's pipe broke" for r in caplog.records)


async def test_a_plain_call_without_a_task_of_its_own_keeps_every_rule_of_a_call() -> None:
    """A plain tools/call of a session-era client through one stdio upstream is sent from the
    reader and answered from the upstream's reader (Router._plain_call), and keeps the rules of
    any call: a cancelled call is cancelled upstream and gets no reply, one past the upstream's
    deadline is cancelled upstream and answered with the knob that set it, a large result is
    governed, and one whose upstream dies is answered with why."""
    session_era = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}

    async def call(ident: int, name: str, **arguments: Any) -> Any:
        return result(await wire.request(ident, "tools/call", {"name": name, "arguments": arguments}, modern=False))

    async def cancelled_upstream(count: int) -> None:
        for _ in range(int(paced(5) / 0.05)):
            if (await call(99, "cancellations"))["structuredContent"] == {"result": count}:
                return
            await anyio.sleep(0.05)
        raise AssertionError(f"not {count} cancellations upstream")

    upstream = UpstreamConnection(notes_command(), name="notes")
    upstream.follow_client()
    within = paced(2.0)  # the upstream's call deadline: every call here but the sleeps answers within it
    async with upstream, served(upstream, seconds=40, timeouts={"notes": within}) as (_, wire):
        assert "result" in await wire.request(0, "initialize", session_era, modern=False)
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert (await call(1, "add", a=2, b=3))["structuredContent"] == {"result": 5}
        sleep = {"name": "sleep", "arguments": {"seconds": 30}}
        await wire.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": sleep})
        await anyio.sleep(paced(0.3))  # long enough for the call to reach the upstream
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
        await cancelled_upstream(1)
        late = await call(3, "sleep", seconds=30)
        assert late["isError"] is True and f"did not answer within {within:g} s" in late["content"][0]["text"]
        assert "upstreams.notes.timeout" in late["content"][0]["text"]
        await cancelled_upstream(2)
        blob = await call(4, "blob", size=1_000_000)
        assert "frugal__fetch_slice" in blob["content"][0]["text"]
        crashed = await call(5, "crash")
        assert crashed["isError"] is True and "exited with status 3" in crashed["content"][0]["text"]
        await upstream.shutdown()
    assert 2 not in [message.get("id") for message in wire.seen]


class SealAfterTheClient(Policy):
    """Seals a call only once the client has its answer (the test says so), and fails the seal
    of a call whose `b` is 13."""

    name = "seal-after-the-client"

    def __init__(self) -> None:
        self.client_has: dict[Any, anyio.Event] = {}
        self.sealed: list[Any] = []

    async def seal(self, exchange: Exchange) -> None:
        ident = exchange.call.request_id
        await self.client_has.setdefault(ident, anyio.Event()).wait()
        self.sealed.append(ident)
        if jsonrpc.decode_any(exchange.call.params["arguments"]).get("b") == 13:
            raise RuntimeError("the seal broke")


async def test_a_plain_call_is_answered_before_it_is_sealed(caplog: pytest.LogCaptureFixture) -> None:
    """A plain call's answer goes to the client before the seal hooks run (they only read the
    finished exchange): a seal that waits for the client to have its answer does not hold it
    up. Every call is still sealed, `drain` waits for the seals, and a seal that fails after the
    answer went out is logged for that call while the next is served."""
    session_era = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    gate = SealAfterTheClient()
    upstream = UpstreamConnection(notes_command(), name="notes")
    upstream.follow_client()
    with caplog.at_level(logging.ERROR, "frugal_proxy.session"):
        async with (
            upstream,
            served(upstream, seconds=30, assembly=Assembly(policies=[gate])) as (router, wire),
        ):
            assert "result" in await wire.request(0, "initialize", session_era, modern=False)
            await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            for ident, b in ((1, 3), (2, 13), (3, 4)):
                params = {"name": "add", "arguments": {"a": 2, "b": b}}
                reply = result(await wire.request(ident, "tools/call", params, modern=False))
                assert reply["structuredContent"] == {"result": 2 + b}
                assert gate.sealed == list(range(1, ident))  # not sealed before the client had it
                gate.client_has.setdefault(ident, anyio.Event()).set()
                with deadline(5):
                    await router.drain()  # waits for the seal
                assert gate.sealed == list(range(1, ident + 1))
            await upstream.shutdown()
    assert "sealing a call failed after its answer was sent" in caplog.text
    assert [r for r in caplog.records if r.exc_info and "the seal broke" in str(r.exc_info[1])]


async def test_a_plain_calls_objects_are_freed_as_it_ends_without_the_garbage_collector() -> None:
    """A plain call leaves no reference cycle behind (its Pending once held the call that holds
    it): with the collector off, no exchange of a finished call is still alive, so none waits for
    a collection (which cost about 30 µs a call) and none is promoted to an older generation."""
    session_era = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    upstream = UpstreamConnection(notes_command(), name="notes")
    upstream.follow_client()
    gc.collect()
    # What other tests in this worker still hold is theirs: only this test's exchanges count.
    earlier = {id(o) for o in gc.get_objects() if isinstance(o, Exchange)}
    gc.disable()
    try:
        async with upstream, served(upstream, seconds=30) as (router, wire):
            assert "result" in await wire.request(0, "initialize", session_era, modern=False)
            await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            for ident in range(1, 21):
                params = {"name": "add", "arguments": {"a": ident, "b": 3}}
                reply = result(await wire.request(ident, "tools/call", params, modern=False))
                assert reply["structuredContent"] == {"result": ident + 3}
            with deadline(5):
                await router.drain()
            await anyio.sleep(0.05)  # the upstream's reader is back at its read
            alive = [o for o in gc.get_objects() if isinstance(o, Exchange) and id(o) not in earlier]
            assert alive == []
            await upstream.shutdown()
    finally:
        gc.enable()


async def test_a_priced_plain_call_cancelled_after_it_was_sent_is_sealed_as_maybe_billed() -> None:
    """A plain call of a priced upstream (`cost_per_call`) that the client cancels once it was
    sent may have been billed: it gets no reply, and is sealed with an attempt that costs its
    price, marked maybe_billed, so the ledger counts it. One of a free upstream is not sealed."""
    session_era = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    for price in (2_500, 0):
        recorder = Recorder()
        upstream = UpstreamConnection(notes_command(), name="notes")
        upstream.follow_client()
        async with (
            upstream,
            served(upstream, seconds=30, prices={"notes": price}, assembly=Assembly(policies=[recorder])) as (
                router,
                wire,
            ),
        ):
            assert "result" in await wire.request(0, "initialize", session_era, modern=False)
            await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            sleep = {"name": "sleep", "arguments": {"seconds": 30}}
            await wire.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": sleep})
            await anyio.sleep(0.3)
            await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
            with deadline(10):
                await router.drain()  # the cancelled call leaves the table once withdrawn (and sealed)
            await upstream.shutdown()
        assert 2 not in [message.get("id") for message in wire.seen]
        if not price:
            assert recorder.seen == []
            continue
        (sealed,) = recorder.seen
        (attempt,) = sealed.attempts
        assert (attempt.provider, attempt.cost_micros, attempt.maybe_billed) == ("notes", 2_500, True)
        assert attempt.error == (
            "notes was cancelled; its request had gone out, so it may have been billed ($0.0025, counted as spent)"
        )
        assert sealed.receipt is not None and sealed.receipt.total_micros == 2_500


async def test_a_priced_plain_call_past_its_upstreams_timeout_is_answered_as_maybe_billed() -> None:
    """The upstream's own timeout (`upstreams.NAME.timeout`) ran out on a plain call it had been
    sent: the client gets the timeout as a tool error, and the attempt costs its price, marked
    maybe_billed (it cost $0 before)."""
    session_era = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    recorder = Recorder()
    upstream = UpstreamConnection([sys.executable, str(FAULTY_SERVER)], name="faulty")
    upstream.follow_client()
    options = {"prices": {"faulty": 2_500}, "timeouts": {"faulty": 0.5}, "assembly": Assembly(policies=[recorder])}
    async with upstream, served(upstream, seconds=30, **options) as (router, wire):
        assert "result" in await wire.request(0, "initialize", session_era, modern=False)
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        slow = {"name": "slow", "arguments": {"seconds": 30}}
        reply = await wire.request(2, "tools/call", slow, modern=False)
        with deadline(10):
            await router.drain()
        await upstream.shutdown()
    assert result(reply)["isError"] is True
    assert result(reply)["_meta"]["frugal/route"]["attempts"][0]["maybe_billed"] is True
    (sealed,) = recorder.seen
    (attempt,) = sealed.attempts
    assert (attempt.provider, attempt.cost_micros, attempt.maybe_billed) == ("faulty", 2_500, True)
    assert attempt.error is not None and attempt.error.endswith(
        "its request had gone out, so it may have been billed ($0.0025, counted as spent)"
    )
