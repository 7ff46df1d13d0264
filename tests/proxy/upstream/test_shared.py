"""Shared upstream connections: the share key, a pool over a real stdio notes server, and over a
fake one: subscription counting, log levels per session, server requests routed to their call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.fleet import Fleet, UpstreamSpec
from frugal_proxy.upstream.shared import SharedUpstreams, SharedView, share_key
from tests.conftest import notes_command
from tests.fake_peers import FakeCall, FakeUpstream, decoded
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio

PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"a": {}, "b": {}}}}


def test_sessions_that_declare_the_same_share_one_key() -> None:
    same_in_other_order = {"protocolVersion": "2025-11-25", "capabilities": {"experimental": {"b": {}, "a": {}}}}
    assert share_key("notes", PARAMS, operator="a") == share_key("notes", same_in_other_order, operator="a")
    assert share_key("notes", PARAMS, operator="a") != share_key("other", PARAMS, operator="a")
    assert share_key("notes", PARAMS, operator="a") != share_key(
        "notes", {**PARAMS, "protocolVersion": "2025-06-18"}, operator="a"
    )
    assert share_key("notes", PARAMS, operator="a") != share_key(
        "notes", {"protocolVersion": "2025-11-25", "capabilities": {}}, operator="a"
    )


def test_sessions_of_different_operators_never_share() -> None:
    # An upstream's own per-connection state (the notes a server keeps) must not cross tenants.
    assert share_key("notes", PARAMS, operator="alice") != share_key("notes", PARAMS, operator="bob")
    assert share_key("notes", PARAMS, operator="alice") == share_key("notes", PARAMS, operator="alice")


@pytest.mark.parametrize("capability", ["sampling", "elicitation", "roots"])
def test_a_session_the_upstream_could_ask_is_not_shared(capability: str) -> None:
    assert share_key("notes", {"protocolVersion": "2025-11-25", "capabilities": {capability: {}}}, operator="a") is None


def test_an_initialize_without_a_version_is_not_shared() -> None:
    assert share_key("notes", {"capabilities": {}}, operator="a") is None


async def test_two_views_share_one_initialized_process_until_the_last_leaves() -> None:
    fleet = Fleet((UpstreamSpec(name="notes", command=tuple(notes_command())),))
    key = share_key("notes", PARAMS, operator="a")
    assert key is not None
    with deadline(30):
        async with anyio.create_task_group() as tg:
            pool = SharedUpstreams(tg, fleet.connect_one, grace=0.1)
            first = await pool.acquire(key, PARAMS)
            second = await pool.acquire(key, PARAMS)
            assert first.shared is second.shared and len(pool) == 1
            assert first.initialize_params is None  # until this session has initialized through it
            answered = await first.initialize(PARAMS)
            assert await second.initialize(PARAMS) == answered
            sent: dict[str, Any] = first.shared.params  # what the one initialize declared
            assert first.initialize_params is sent and sent["clientInfo"]["name"] == "frugal-proxy"
            refused = await second.reinitialize(PARAMS)
            assert jsonrpc.error_of(refused) is not None
            call = {"name": "add", "arguments": {"a": 1, "b": 2}}
            reply = await second.request("tools/call", call)
            assert "result" in reply
            connection = first.shared.connection
            await first.shutdown()
            await anyio.sleep(0.3)
            assert connection.running and len(pool) == 1  # the second still holds it
            await second.shutdown()
            for _ in range(int(paced(10) / 0.05)):
                if not len(pool) and not connection.running:
                    break
                await anyio.sleep(0.05)
            assert not len(pool) and not connection.running


ASKED = {"protocolVersion": "2025-11-25", "capabilities": {"sampling": {}, "elicitation": {}}}


def test_sessions_that_can_be_asked_share_only_where_requests_name_their_call() -> None:
    # Over Streamable HTTP a server request comes on the stream of the call that caused it.
    assert share_key("web", ASKED, operator="a", attributes_requests=True) is not None
    assert share_key("web", ASKED, operator="a") is None  # stdio: nothing names the call
    roots = {"protocolVersion": "2025-11-25", "capabilities": {"roots": {}, "sampling": {}}}
    assert share_key("web", roots, operator="a", attributes_requests=True) is None  # asked outside any call


@asynccontextmanager
async def pool_of(upstream: FakeUpstream, params: dict[str, Any], count: int = 2) -> AsyncIterator[list[SharedView]]:
    """`count` initialized views of one shared connection to `upstream`."""
    key = share_key(upstream.name, params, operator="a", attributes_requests=True)
    assert key is not None
    with deadline(10):
        async with anyio.create_task_group() as tg:
            pool = SharedUpstreams(tg, lambda _name: upstream, grace=0)
            views = [await pool.acquire(key, params) for _ in range(count)]
            for view in views:
                assert "result" in await view.initialize(params)
            yield views
            for view in views:
                await view.shutdown()
            pool.close_all()


class Heard:
    """What one session was sent unasked."""

    def __init__(self, view: SharedView) -> None:
        self.frames: list[Frame] = []
        view.on_notification = self.notified

    async def notified(self, _upstream: UpstreamBase, frame: Frame) -> None:
        self.frames.append(frame)


def held(upstream: FakeUpstream, gate: anyio.Event, refused: bool = False) -> None:
    """Make the fake's resources/subscribe wait for `gate` (then accept, or refuse)."""

    async def subscribe(call: FakeCall) -> Any:
        await gate.wait()
        if refused:
            return jsonrpc.error(None, jsonrpc.INVALID_PARAMS, f"no such resource {call.params['uri']}")
        return {}

    upstream.handlers["resources/subscribe"] = subscribe
    upstream.handlers["resources/unsubscribe"] = lambda call: _empty()


async def _empty() -> Any:
    return {}


async def subscribe_at_once(views: list[SharedView], uri: str, gate: anyio.Event) -> list[Frame]:
    """Every view's answer to subscribing `uri`, all sent before the upstream answers any."""
    replies: list[Frame] = []

    async def subscribe(view: SharedView) -> None:
        replies.append(await view.request("resources/subscribe", {"uri": uri}))

    async with anyio.create_task_group() as tg:
        for view in views:
            tg.start_soon(subscribe, view)
        await anyio.wait_all_tasks_blocked()
        gate.set()
    return replies


async def test_two_sessions_subscribing_at_once_subscribe_upstream_once() -> None:
    upstream, gate = FakeUpstream("res", era="legacy"), anyio.Event()
    held(upstream, gate)
    async with pool_of(upstream, PARAMS) as (first, second):
        replies = await subscribe_at_once([first, second], "demo://x", gate)
        assert all("result" in reply for reply in replies) and len(replies) == 2
        assert upstream.methods().count("resources/subscribe") == 1
        heard_first, heard_second = Heard(first), Heard(second)
        await upstream.tell("notifications/resources/updated", {"uri": "demo://x"})
        assert len(heard_first.frames) == len(heard_second.frames) == 1
        await first.request("resources/unsubscribe", {"uri": "demo://x"})
        assert "resources/unsubscribe" not in upstream.methods()  # the second still holds it
        await upstream.tell("notifications/resources/updated", {"uri": "demo://x"})
        assert (len(heard_first.frames), len(heard_second.frames)) == (1, 2)
        await second.request("resources/unsubscribe", {"uri": "demo://x"})
        assert upstream.methods().count("resources/unsubscribe") == 1
        assert first.shared.subscriptions == {}


async def test_a_refused_subscribe_answers_every_session_that_waited_for_it() -> None:
    upstream, gate = FakeUpstream("res", era="legacy"), anyio.Event()
    held(upstream, gate, refused=True)
    async with pool_of(upstream, PARAMS) as (first, second):
        replies = await subscribe_at_once([first, second], "demo://gone", gate)
        errors = [jsonrpc.error_of(reply) for reply in replies]
        assert errors == [(jsonrpc.INVALID_PARAMS, "no such resource demo://gone")] * 2
        assert upstream.methods().count("resources/subscribe") == 1
        assert first.shared.subscriptions == {} and not first.uris and not second.uris
        assert jsonrpc.error_of(await second.request("resources/subscribe", {"uri": "demo://gone"})) is not None
        assert upstream.methods().count("resources/subscribe") == 2  # a later subscribe asks again


async def test_the_last_subscriber_ending_its_session_ends_the_upstream_subscription() -> None:
    upstream, gate = FakeUpstream("res", era="legacy"), anyio.Event()
    held(upstream, gate)
    gate.set()
    async with pool_of(upstream, PARAMS, count=3) as (first, second, third):
        for view in (first, second):
            assert "result" in await view.request("resources/subscribe", {"uri": "demo://kept"})
        assert "result" in await third.request("resources/subscribe", {"uri": "demo://own"})
        await first.shutdown()
        assert "resources/unsubscribe" not in upstream.methods()
        await second.shutdown()
        assert upstream.last("resources/unsubscribe").params == {"uri": "demo://kept"}
        await third.shutdown()
        assert [call.params["uri"] for call in upstream.calls if call.method == "resources/unsubscribe"] == [
            "demo://kept",
            "demo://own",
        ]


async def test_a_session_ending_while_its_subscribe_is_under_way_holds_nothing() -> None:
    upstream, gate = FakeUpstream("res", era="legacy"), anyio.Event()
    held(upstream, gate)
    async with pool_of(upstream, PARAMS) as (leaving, _staying):
        async with anyio.create_task_group() as tg:
            tg.start_soon(leaving.request, "resources/subscribe", {"uri": "demo://late"})
            await anyio.wait_all_tasks_blocked()
            await leaving.shutdown()
            gate.set()
        assert upstream.methods().count("resources/unsubscribe") == 1  # the upstream is not left subscribed
        assert leaving.shared.subscriptions == {} and not leaving.uris


async def test_each_session_hears_log_messages_at_its_own_level() -> None:
    upstream = FakeUpstream("logs", era="legacy")
    upstream.handlers["logging/setLevel"] = lambda call: _empty()
    async with pool_of(upstream, PARAMS, count=3) as (quiet, verbose, unset):
        heard = {view: Heard(view) for view in (quiet, verbose, unset)}
        assert "result" in await quiet.request("logging/setLevel", {"level": "error"})
        assert "result" in await verbose.request("logging/setLevel", {"level": "info"})
        assert upstream.last("logging/setLevel").params == {"level": "info"}  # the most verbose asked
        await upstream.tell("notifications/message", {"level": "info", "data": "chatty"})
        await upstream.tell("notifications/message", {"level": "error", "data": "bad"})
        levels = {view: [decoded(frame["params"])["level"] for frame in heard[view].frames] for view in heard}
        assert levels == {quiet: ["error"], verbose: ["info", "error"], unset: ["info", "error"]}
        await verbose.shutdown()
        assert upstream.last("logging/setLevel").params == {"level": "error"}  # the one left


class Asked:
    """One session's client: it answers the upstream's requests with its own name."""

    def __init__(self, view: SharedView, name: str) -> None:
        self.name = name
        self.methods: list[str | None] = []
        view.on_server_request = self.answer

    async def answer(self, upstream: UpstreamBase, frame: Frame) -> None:
        self.methods.append(jsonrpc.method_of(frame))
        await upstream.send_reply(jsonrpc.result(jsonrpc.id_of(frame), {"answeredBy": self.name}))


async def test_a_server_request_reaches_the_session_whose_call_caused_it() -> None:
    upstream = FakeUpstream("asks", era="legacy")
    both_asking = anyio.Event()
    asking = 0

    async def call(request: FakeCall) -> Any:
        nonlocal asking
        asking += 1
        if asking == 2:
            both_asking.set()
        await both_asking.wait()  # both sessions' calls are under way at once
        method = request.params["arguments"]["method"]
        reply = await upstream.ask(method, {})  # in the call's own task, as on its response stream
        return {"content": [{"type": "text", "text": decoded(reply["result"])["answeredBy"]}]}

    upstream.handlers["tools/call"] = call
    async with pool_of(upstream, ASKED) as (first, second):
        clients = Asked(first, "first"), Asked(second, "second")
        answers: dict[str, str] = {}

        async def run(view: SharedView, who: str, method: str) -> None:
            reply = await view.request("tools/call", {"name": "ask", "arguments": {"method": method}})
            answers[who] = decoded(reply["result"])["content"][0]["text"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, first, "first", "sampling/createMessage")
            tg.start_soon(run, second, "second", "elicitation/create")
        assert answers == {"first": "first", "second": "second"}
        assert clients[0].methods == ["sampling/createMessage"]
        assert clients[1].methods == ["elicitation/create"]
        assert first.shared.callers == {}


async def test_a_server_request_outside_any_call_is_refused_on_a_shared_connection() -> None:
    upstream = FakeUpstream("asks", era="legacy")
    async with pool_of(upstream, ASKED) as (first, second):
        clients = Asked(first, "first"), Asked(second, "second")
        problem = jsonrpc.error_of(await upstream.ask("sampling/createMessage", {}))
        assert problem is not None and "share = false" in problem[1]
        undeclared = jsonrpc.error_of(await upstream.ask("roots/list", {}))
        assert undeclared is not None and "declared no capability" in undeclared[1]
        assert clients[0].methods == clients[1].methods == []


async def test_a_url_elicitation_completes_only_for_the_session_asked() -> None:
    upstream = FakeUpstream("asks", era="legacy")

    async def call(request: FakeCall) -> Any:
        await upstream.ask("elicitation/create", {"mode": "url", "elicitationId": "e-1", "url": "http://127.0.0.1/x"})
        return {"content": []}

    upstream.handlers["tools/call"] = call
    async with pool_of(upstream, ASKED) as (first, second):
        for view, name in ((first, "first"), (second, "second")):
            Asked(view, name)
        heard_first, heard_second = Heard(first), Heard(second)
        await second.request("tools/call", {"name": "open", "arguments": {}})
        await upstream.tell("notifications/elicitation/complete", {"elicitationId": "e-1"})
        await upstream.tell("notifications/elicitation/complete", {"elicitationId": "e-1"})  # once only
        assert heard_first.frames == [] and len(heard_second.frames) == 1
