"""The MCP tool provider classifies what its forwarder does, with a fake forwarder in place of
the session's link (no upstream, no patching); and how far its call got decides, against real
upstreams, whether a paid one left without an answer may have been billed."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.config import ProviderConfig
from frugal_proxy.errors import UpstreamDown, UpstreamError
from frugal_proxy.ledger.line import UsageLine
from frugal_proxy.pipeline.dispatch import DispatchSettings
from frugal_proxy.pipeline.pipeline import Pipeline, build_pipeline
from frugal_proxy.policies.budget import Budget
from frugal_proxy.policies.ledger import Ledger
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.providers import Provider
from frugal_proxy.providers.mcp_tool import McpToolProvider
from frugal_proxy.providers.upstream_tool import UpstreamToolProvider
from frugal_proxy.records import Attempt, Call, Exchange, Outcome, ProgressSink, ProviderSpec, Route, StreamCut
from frugal_proxy.state.spend import MemorySpend, spend_key
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.http import HttpUpstreamConnection
from frugal_proxy.upstream.stdio import UpstreamConnection
from tests.conftest import FAULTY_SERVER
from tests.e2e.test_http_upstream import faulty_http, notes_http  # noqa: F401 - fixtures: the HTTP servers
from tests.fake_peers import FakeClient
from tests.pace import deadline, paced
from tests.routed_calls import error_text
from tests.routed_calls import search as routed

pytestmark = pytest.mark.anyio


class FakeForwarder:
    """A forwarder whose answer (or fault) comes from a handler; it records what it was asked."""

    def __init__(self, handler: Callable[[], Awaitable[Frame]]) -> None:
        self.handler = handler
        self.calls: list[tuple[str, dict[str, msgspec.Raw], Mapping[str, str] | None]] = []

    async def __call__(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        client: Any,
        on_progress: ProgressSink | None,
        headers: Mapping[str, str] | None = None,
        *,
        on_cut: StreamCut | None = None,
    ) -> Frame:
        self.calls.append((method, params, headers))
        return await self.handler()


def raising(exc: Exception) -> Callable[[], Awaitable[Frame]]:
    async def handler() -> Frame:
        raise exc

    return handler


async def call(
    handler: Callable[[], Awaitable[Frame]],
    headers: Mapping[str, str] | None = None,
) -> Outcome:
    forward = FakeForwarder(handler)
    provider = McpToolProvider("remote", forward)
    params = {"name": jsonrpc.raw("search"), "arguments": jsonrpc.raw({"q": "x"})}
    ident = Call(request_id=1, tool="search", params=params, forwarded_headers=headers)
    exchange = Exchange(call=ident, route=Route("search", ("remote",)))
    with deadline(5):
        outcome = await provider.call(exchange)
    assert forward.calls == [("tools/call", params, headers)]  # the call's headers go on with it
    return outcome


async def test_a_reply_is_the_upstreams_own_answer() -> None:
    reply = jsonrpc.result(7, {"content": [], "isError": True})

    async def answer() -> Frame:
        return reply

    assert await call(answer) == Outcome("ok", reply=reply)
    assert await call(answer, headers={"mcp-param-region": "eu"}) == Outcome("ok", reply=reply)


async def test_refused_credentials_are_permanent() -> None:
    refused = UpstreamError("upstream 'remote': refused the proxy's credentials (HTTP 401)", permanent=True)
    outcome = await call(raising(refused))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("permanent", str(refused), None)


async def test_a_server_that_says_when_to_come_back_is_rate_limiting() -> None:
    limited = UpstreamError("upstream 'remote': is rate limiting (HTTP 429); retry after 30 s", retry_after=30.0)
    outcome = await call(raising(limited))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("rate_limited", str(limited), 30.0)


@pytest.mark.parametrize(
    "fault",
    [
        UpstreamDown("remote", "exited with status 1", ["Traceback …"]),
        UpstreamError("upstream 'remote' answered with something that is not JSON-RPC"),
    ],
)
async def test_any_other_fault_is_transient(fault: UpstreamError) -> None:
    outcome = await call(raising(fault))
    assert (outcome.kind, outcome.message, outcome.retry_after) == ("transient", str(fault), None)


async def test_a_route_candidate_calls_its_own_tool_and_fails_over_on_a_json_rpc_error() -> None:
    async def refused() -> Frame:
        return jsonrpc.error(1, jsonrpc.INVALID_PARAMS, "unknown tool: web_search")

    async def answered() -> Frame:
        return jsonrpc.result(1, {"content": [], "isError": True})

    params = {"name": jsonrpc.raw("search"), "arguments": jsonrpc.raw({"q": "x"})}
    exchange = Exchange(call=Call(1, "search", params), route=Route("search", ("routes/eu.web_search",)))
    for handler, kind in ((refused, "permanent"), (answered, "ok")):
        forward = FakeForwarder(handler)
        provider = McpToolProvider("eu", forward, tool="web_search")
        with deadline(5):
            outcome = await provider.call(exchange)
        assert provider.spec.name == "eu.web_search" and outcome.kind == kind
        [(_, sent, _)] = forward.calls
        assert sent == {**params, "name": jsonrpc.raw("web_search")}  # the name its upstream knows
    refusal = await McpToolProvider("eu", FakeForwarder(refused), tool="web_search").call(exchange)
    assert refusal.message == "eu.web_search refused the call (unknown tool: web_search)"


# -- billing: how far the call got, against real upstreams ------------------------------------
#
# A priced provider that is a tool of an upstream MCP server (a capability's upstream tool, a
# priced plain tool), against a real upstream over stdio: whether a call of it that got no answer
# may have been billed follows how far its request got, as for a web API. Once the `tools/call`
# was handed to the upstream's pipe, a cut, a cancel, a timeout or a dropped upstream keeps the
# reservation (maybe billed); before that (the upstream still starting) it costs $0, and so does
# the upstream's own refusal.


PRICE = 8_000  # $0.008 a call
SEARCH = spend_key("search", "faulty")
PLAIN = spend_key("tool", "faulty")
CLIENT = Client("legacy")
# A server that never starts: it reads nothing and answers nothing (a slow start, a hung spawn).
NEVER_STARTS = [sys.executable, "-c", "import time; time.sleep(60)"]


@asynccontextmanager
async def linked(server: list[str] | str, deadline: float | None = None) -> AsyncIterator[UpstreamLink]:
    """A link to the stdio server run by `server`, or to the HTTP server at `server`."""
    upstream: UpstreamBase
    if isinstance(server, str):
        upstream = HttpUpstreamConnection(server, name="faulty")
    else:
        upstream = UpstreamConnection(server, name="faulty", probe_timeout=paced(30))
    async with upstream, anyio.create_task_group() as tg:
        yield UpstreamLink(upstream, CLIENT, FakeClient().peer, tg, deadline=deadline)
        tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await upstream.shutdown()


class Rig:
    """A pipeline over one priced provider of the link, a daily cap of `cap` on it, the ledger."""

    def __init__(self, key: str, provider: Provider, cap: int, deadline: float | None = None) -> None:
        self.key = key
        self.budget = Budget({key: cap}, MemorySpend(time.time))
        self.lines: list[UsageLine] = []
        self.pipeline: Pipeline = build_pipeline(
            {"faulty": provider}, [self.budget, Ledger(self.lines)], DispatchSettings(deadline=deadline)
        )

    @property
    def spent(self) -> int:
        return self.budget.book.spent(self.key)


def searching(link: UpstreamLink, tool: str, **args: Any) -> UpstreamToolProvider:
    """`frugal__search` served by the faulty server's `tool` (its answer is never a hit list)."""
    options = ProviderConfig(upstream="faulty", tool=tool, args=args)
    return UpstreamToolProvider(ProviderSpec("faulty", "search", PRICE), options, link.forward)


def plain(tool: str, **args: Any) -> Exchange:
    """A plain tools/call of the faulty server's `tool`."""
    params = {"name": jsonrpc.raw(tool), "arguments": jsonrpc.raw(args)}
    ex = Exchange(Call(1, tool, params), Route(tool, ("faulty",)))
    ex.client = CLIENT
    return ex


def searched() -> Exchange:
    """A frugal__search routed to the faulty server's tool, from the legacy client."""
    ex = routed("faulty")
    ex.client = CLIENT
    return ex


async def priced_plain_call(
    server: list[str] | str, call_deadline: float | None, tool: str, **args: Any
) -> tuple[Attempt, Rig]:
    """One plain call of `tool` of a priced upstream under a daily cap of its price: its attempt."""
    async with linked(server) as link:
        with deadline(30):  # the upstream started and initialized outside the deadline tested
            await link.forward("tools/list", {}, CLIENT, None)
        link.deadline = call_deadline
        rig = Rig(PLAIN, McpToolProvider("faulty", link.forward, PRICE), cap=PRICE)
        ex = plain(tool, **args)
        with deadline(20):
            await rig.pipeline.run(ex)
    (attempt,) = ex.attempts
    return attempt, rig


async def test_a_call_the_upstream_received_and_held_past_the_deadline_counts_against_the_cap() -> None:
    async with linked([sys.executable, str(FAULTY_SERVER)]) as link:
        rig = Rig(SEARCH, searching(link, "slow", seconds=30), cap=2 * PRICE, deadline=0.5)
        await link.forward("tools/call", plain("echo").call.params, CLIENT, None)  # started, initialized
        calls = [searched() for _ in range(3)]
        with deadline(10):
            answers = [await rig.pipeline.run(ex) for ex in calls]
    assert rig.spent == 2 * PRICE  # the third call found the cap reached by the two cut ones
    (attempt,) = calls[0].attempts
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("transient", PRICE, True)
    assert error_text(answers[0]).endswith(
        "faulty did not answer within the call deadline (500ms); its request had gone out, so it may have "
        "been billed ($0.0080, counted as spent)"
    )
    assert "budget: skipped faulty" in error_text(answers[2])
    assert (rig.lines[0].maybe_billed_usd, rig.lines[0].billed) == (0.008, {"faulty": 0.008})


@pytest.mark.parametrize("cancelled", [False, True])
async def test_a_call_cut_while_its_upstream_was_still_starting_costs_nothing(cancelled: bool) -> None:
    async with linked(NEVER_STARTS) as link:
        rig = Rig(SEARCH, searching(link, "slow", seconds=30), cap=PRICE, deadline=None if cancelled else 0.5)
        ex = searched()
        with deadline(10):
            if cancelled:
                with anyio.move_on_after(0.5):  # what the router does when the client cancels it
                    await rig.pipeline.run(ex)
            else:
                answer = await rig.pipeline.run(ex)
                assert "faulty did not answer within the call deadline (500ms)" in error_text(answer)
    assert rig.spent == 0
    assert all(not attempt.maybe_billed and attempt.cost_micros == 0 for attempt in ex.attempts)
    assert [line.maybe_billed_usd for line in rig.lines] == ([] if cancelled else [0.0])


async def test_a_priced_plain_tool_past_its_upstreams_timeout_may_have_billed() -> None:
    """The link's own deadline (`upstreams.NAME.timeout`) ran out on a call the upstream had
    received: no answer, so it counts like a cut (it cost $0 before)."""
    attempt, rig = await priced_plain_call([sys.executable, str(FAULTY_SERVER)], 0.5, "slow", seconds=30)
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("transient", PRICE, True)
    assert attempt.error is not None and attempt.error.startswith("upstream 'faulty' did not answer within 0.5 s")
    assert attempt.error.endswith("its request had gone out, so it may have been billed ($0.0080, counted as spent)")
    assert rig.spent == PRICE and rig.lines[0].maybe_billed_usd == 0.008


async def test_an_upstream_that_died_with_the_call_may_have_billed_and_its_refusal_did_not() -> None:
    async with linked([sys.executable, str(FAULTY_SERVER)]) as link:
        rig = Rig(SEARCH, searching(link, "die"), cap=2 * PRICE, deadline=10)
        died = searched()
        with deadline(10):
            await rig.pipeline.run(died)
        assert rig.spent == PRICE and died.attempts[0].maybe_billed
        refusing = Rig(SEARCH, searching(link, "no_such_tool"), cap=PRICE, deadline=10)
        refused = searched()
        with deadline(10):
            await refusing.pipeline.run(refused)  # the upstream restarts and answers a JSON-RPC error
    (attempt,) = refused.attempts
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("permanent", 0, False)
    assert "refused the call" in (attempt.error or "")
    assert refusing.spent == 0


async def test_over_http_a_call_past_the_timeout_may_have_billed_and_a_failure_status_did_not(
    request: pytest.FixtureRequest,
) -> None:
    """The POST's body was handed over, then no answer within the upstream's timeout: it may
    have billed. A 500 is the server's refusal: $0, as a web API's."""
    notes, faulty = request.getfixturevalue("notes_http"), request.getfixturevalue("faulty_http")
    attempt, rig = await priced_plain_call(notes, 0.5, "sleep", seconds=30)
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("transient", PRICE, True)
    assert rig.spent == PRICE
    attempt, rig = await priced_plain_call(f"{faulty}/mcp", None, "boom")
    assert (attempt.outcome, attempt.cost_micros, attempt.maybe_billed) == ("transient", 0, False)
    assert "HTTP 500" in (attempt.error or "") and rig.spent == 0
