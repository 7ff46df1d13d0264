"""UpstreamLink at its seam: the four cases client era x upstream era, against a fake upstream
(the real UpstreamBase with a handler for a server) and a client that answers from a dict."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from frugal_proxy.bridge.downstream import ClientUnreachable, DownstreamPeer
from frugal_proxy.bridge.link import Client, UpstreamLink, bridged_capabilities, covers, widened
from frugal_proxy.errors import BridgeError, UpstreamTimeout
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.upstream.base import PROXY_CLIENT_INFO
from tests.fake_peers import FakeCall, FakeClient, FakeUpstream, decoded, linked
from tests.pace import deadline

pytestmark = pytest.mark.anyio

MODERN_META = {eras.META_VERSION: eras.LATEST_MODERN, eras.META_CAPABILITIES: {"roots": {}}}
ASKING = {
    "resultType": "input_required",
    "inputRequests": {"who": {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {}}}},
    "requestState": "opaque-1",
}


@asynccontextmanager
async def link_to(
    upstream: FakeUpstream, client: Client, downstream: FakeClient | None = None
) -> AsyncIterator[UpstreamLink]:
    async with linked([upstream], client, downstream) as (link,):
        yield link


def params(**values: Any) -> dict[str, Any]:
    return {key: jsonrpc.raw(value) for key, value in values.items()}


def body(reply: Frame) -> Any:
    return jsonrpc.decode_any(reply["result"])


# -- 2026-07-28 client -------------------------------------------------------------------------


async def test_modern_to_modern_is_forwarded_as_it_is() -> None:
    upstream = FakeUpstream(era="modern")

    async def asking(call: FakeCall) -> Any:
        return ASKING

    upstream.handlers["tools/call"] = asking
    sent = params(name="echo", arguments={"x": 1}, _meta={**MODERN_META, "custom/key": "kept"})
    async with link_to(upstream, Client("modern")) as link:
        reply = await link.forward("tools/call", sent, Client("modern", {"roots": {}}), None)
    assert upstream.last("tools/call").params == decoded(sent)
    assert body(reply) == ASKING  # a modern client retries input_required itself
    assert "initialize" not in upstream.methods()


async def test_modern_to_legacy_initializes_strips_meta_and_completes_results() -> None:
    upstream = FakeUpstream(era="legacy")
    sent = params(_meta={**MODERN_META, "progressToken": "p"})
    async with link_to(upstream, Client("modern")) as link:
        reply = await link.forward("tools/list", sent, Client("modern"), None)
        again = await link.forward("tools/list", sent, Client("modern"), None)
    initialize = upstream.last("initialize").params
    assert initialize["capabilities"] == {}  # the client declared nothing: the upstream is told nothing
    assert initialize["clientInfo"] == PROXY_CLIENT_INFO
    assert upstream.methods() == ["initialize", "tools/list", "tools/list"]  # initialized once
    assert upstream.notifications == [("notifications/initialized", None)]
    assert upstream.last("tools/list").params == {"_meta": {"progressToken": "p"}}
    listed = body(reply)
    assert listed["resultType"] == "complete" and listed["ttlMs"] == 0 and listed["cacheScope"] == "private"
    assert body(again) == listed


async def test_modern_to_legacy_declares_what_the_client_declared_and_widens_for_more() -> None:
    """The upstream is told the bridged part of the first request's clientCapabilities; a later
    request that declares more initializes it again with the union; one that declares less or
    the same changes nothing."""
    upstream = FakeUpstream(era="legacy")
    sent = params(_meta=MODERN_META)
    async with link_to(upstream, Client("modern")) as link:
        await link.forward("tools/list", sent, Client("modern", {"elicitation": {}, "experimental": {}}), None)
        await link.forward("tools/list", sent, Client("modern", {}), None)
        await link.forward("tools/list", sent, Client("modern", {"sampling": {}, "roots": {}}), None)
        await link.forward("tools/list", sent, Client("modern", {"sampling": {}}), None)
    declared = [call.params["capabilities"] for call in upstream.calls if call.method == "initialize"]
    assert declared == [
        {"elicitation": {"form": {}}},
        {"elicitation": {"form": {}}, "sampling": {}, "roots": {"listChanged": True}},
    ]
    assert upstream.methods().count("tools/list") == 4


async def test_a_declaration_found_covered_is_remembered_but_never_hides_a_wider_one() -> None:
    """The link keeps the last declaration its session covered, so that a client declaring the
    same each time costs a comparison; one that declares more still widens the session."""
    upstream = FakeUpstream(era="legacy")
    sent = params(_meta=MODERN_META)
    async with link_to(upstream, Client("modern")) as link:
        for _ in range(3):
            await link.forward("tools/list", sent, Client("modern", {"sampling": {}}), None)
        await link.forward("tools/list", sent, Client("modern", {"sampling": {}, "elicitation": {"url": {}}}), None)
        await link.forward("tools/list", sent, Client("modern", {"sampling": {}}), None)
    declared = [call.params["capabilities"] for call in upstream.calls if call.method == "initialize"]
    assert declared == [{"sampling": {}}, {"sampling": {}, "elicitation": {"url": {}}}]
    assert upstream.methods().count("tools/list") == 5


async def test_modern_to_legacy_turns_a_server_request_into_input_required() -> None:
    upstream = FakeUpstream(era="legacy")

    async def samples(call: FakeCall) -> Any:
        answer = await upstream.ask("sampling/createMessage", {"messages": [], "maxTokens": 5})
        return {"content": [{"type": "text", "text": body(answer)["model"]}]}

    upstream.handlers["tools/call"] = samples
    client = Client("modern", {"sampling": {}})
    async with link_to(upstream, Client("modern")) as link:
        first = body(await link.forward("tools/call", params(name="write", _meta=MODERN_META), client, None))
        assert first["resultType"] == "input_required"
        ((key, asked),) = first["inputRequests"].items()
        assert asked["method"] == "sampling/createMessage"
        retry = params(
            name="write",
            _meta=MODERN_META,
            requestState=first["requestState"],
            inputResponses={key: {"model": "m1", "role": "assistant"}},
        )
        final = body(await link.forward("tools/call", retry, client, None))
    assert final["content"][0]["text"] == "m1" and final["resultType"] == "complete"
    (reply,) = upstream.replies
    assert jsonrpc.id_of(reply) == 9001 and body(reply)["model"] == "m1"
    assert upstream.methods().count("tools/call") == 1  # the retry continued the held call


async def test_modern_to_legacy_never_leaves_the_upstream_wider_roots_than_granted() -> None:
    """A session-era server that asks roots/list right after initialize (outside any call) gets
    an empty list, not a refusal; the client's next call asks the client's roots first, the
    upstream hears roots/list_changed, asks again, gets them, and only then sees the call."""
    upstream = FakeUpstream(era="legacy")
    granted = [{"uri": "file:///data/sub", "name": "sub"}]
    seen_by_call: list[Any] = []

    async def reads(call: FakeCall) -> Any:
        seen_by_call.append([body(reply) for reply in upstream.replies])
        return {"content": [{"type": "text", "text": "read"}]}

    upstream.handlers["tools/call"] = reads
    client = Client("modern", {"roots": {}})
    async with link_to(upstream, Client("modern")) as link:
        await link.forward("tools/list", params(_meta=MODERN_META), client, None)
        early = await upstream.ask("roots/list", {})  # as server-filesystem does once initialized
        assert body(early) == {"roots": []}

        async def reask(method: str, params: Any = None) -> None:
            if method == "notifications/roots/list_changed":
                await upstream.ask("roots/list", {})

        upstream.on_notify = reask
        first = body(await link.forward("tools/call", params(name="read", _meta=MODERN_META), client, None))
        assert first["resultType"] == "input_required"
        ((key, asked),) = first["inputRequests"].items()
        assert asked["method"] == "roots/list"
        assert "tools/call" not in upstream.methods()  # nothing reaches the upstream before the roots
        retry = params(
            name="read", _meta=MODERN_META, requestState=first["requestState"], inputResponses={key: {"roots": granted}}
        )
        final = body(await link.forward("tools/call", retry, client, None))
        later = await upstream.ask("roots/list", {})  # outside a call again: the granted roots
    assert final["content"][0]["text"] == "read"
    assert ("notifications/roots/list_changed", None) in upstream.notifications
    assert seen_by_call == [[{"roots": []}, {"roots": granted}]]  # the call came after the narrowing
    assert body(later) == {"roots": granted}


class Unreachable:
    """A client side that cannot be asked anything (a session-era client without a session)."""

    async def send(self, frame: Frame | list[Frame]) -> None:
        raise ClientUnreachable("no session to ask it on (--stateless)")


@asynccontextmanager
async def shared_link(upstream: FakeUpstream, client: Client, made: list[FakeUpstream]) -> AsyncIterator[UpstreamLink]:
    """A link that many clients share: fresh connections (fake upstreams, kept in `made`) for
    the 2026-07-28 clients' root sets."""

    def connect() -> FakeUpstream:
        made.append(FakeUpstream(era="legacy"))
        return made[-1]

    with deadline(10):
        async with anyio.create_task_group() as tg:
            yield UpstreamLink(upstream, client, DownstreamPeer(Unreachable()), tg, connect=connect)
            tg.cancel_scope.cancel()


async def test_a_shared_links_modern_client_is_served_on_a_connection_holding_its_roots() -> None:
    """Each call of a client that declares roots asks them, then goes on the connection for
    that root set, which answers roots/list with them; the link's own holds none."""
    upstream = FakeUpstream(era="legacy")
    made: list[FakeUpstream] = []
    granted = [{"uri": "file:///data/sub", "name": "sub"}]
    client = Client("modern", {"roots": {}})
    async with shared_link(upstream, Client(), made) as link:
        for _ in range(2):
            first = body(await link.forward("tools/call", params(name="read", _meta=MODERN_META), client, None))
            ((key, asked),) = first["inputRequests"].items()
            assert asked["method"] == "roots/list"
            answers = {key: {"roots": granted}}
            retry = params(name="read", _meta=MODERN_META, requestState=first["requestState"], inputResponses=answers)
            assert body(await link.forward("tools/call", retry, client, None))["content"][0]["text"].startswith("read")
        (rooted,) = made  # the same roots twice: one connection
        assert "tools/call" not in upstream.methods() and rooted.methods().count("tools/call") == 2
        assert body(await rooted.ask("roots/list", {})) == {"roots": granted}
        assert body(await upstream.ask("roots/list", {})) == {"roots": []}


async def test_a_shared_links_session_era_client_that_cannot_be_asked_grants_no_roots() -> None:
    """Without a session the client cannot be asked: the upstream gets an empty root list (not
    an error, which server-filesystem takes as leave to serve its own directories)."""
    upstream = FakeUpstream(era="legacy")
    client = Client("legacy", {"roots": {}})
    async with shared_link(upstream, client, []) as link:
        await link.initialize_for_client({"capabilities": {"roots": {}}}, passthrough=True)
        assert body(await upstream.ask("roots/list", {})) == {"roots": []}


# -- session-era client ------------------------------------------------------------------------


async def test_legacy_to_modern_is_described_from_discover_and_stamped() -> None:
    upstream = FakeUpstream(
        era="modern",
        capabilities={"tools": {}, "extensions": {"x": {}}},
        instructions="Be brief.",
    )
    client = Client("legacy", {"sampling": {}}, {"name": "cli", "version": "2"}, "2025-06-18", "debug")
    async with link_to(upstream, client) as link:
        handshake = body(await link.initialize_for_client({"protocolVersion": "2025-06-18"}, passthrough=True))
        await link.forward("tools/call", params(name="echo", arguments={}), client, None)
    assert handshake == {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {}},  # extensions are a 2026-07-28 notion
        "serverInfo": {"name": "fake", "version": "1.0"},
        "instructions": "Be brief.",
    }
    assert upstream.last("tools/call").params["_meta"] == {
        eras.META_VERSION: eras.LATEST_MODERN,
        eras.META_CAPABILITIES: {"sampling": {}},
        eras.META_CLIENT_INFO: {"name": "cli", "version": "2"},
        eras.META_LOG_LEVEL: "debug",
    }
    assert "initialize" not in upstream.methods()


async def test_legacy_to_modern_asks_the_client_what_input_required_wants() -> None:
    upstream = FakeUpstream(era="modern")

    async def asking_once(call: FakeCall) -> Any:
        if "inputResponses" not in call.params:
            return ASKING
        return {"content": [{"type": "text", "text": call.params["inputResponses"]["who"]["content"]["name"]}]}

    upstream.handlers["tools/call"] = asking_once
    client = Client("legacy", {"elicitation": {}})
    downstream = FakeClient({"elicitation/create": {"action": "accept", "content": {"name": "Ada"}}})
    async with link_to(upstream, client, downstream) as link:
        reply = body(await link.forward("tools/call", params(name="greet"), client, None))
    assert reply["content"][0]["text"] == "Ada"
    assert downstream.methods() == ["elicitation/create"]
    assert upstream.last("tools/call").params["requestState"] == "opaque-1"


async def test_legacy_to_modern_gets_list_changes_through_one_listen_stream() -> None:
    upstream = FakeUpstream(era="modern", capabilities={"tools": {"listChanged": True}})
    listening = anyio.Event()

    async def listen(call: FakeCall) -> Any:
        assert call.on_related is not None
        await call.on_related(jsonrpc.notification("notifications/tools/list_changed", {}))
        listening.set()
        await anyio.sleep_forever()

    upstream.handlers["subscriptions/listen"] = listen
    changed: list[str | None] = []

    async def on_change(link: UpstreamLink, frame: Frame) -> None:
        changed.append(jsonrpc.method_of(frame))

    client = Client("legacy")
    downstream = FakeClient()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            link = UpstreamLink(upstream, client, downstream.peer, tg, on_change=on_change)
            await link.initialize_for_client({}, passthrough=True)
            await listening.wait()
            tg.cancel_scope.cancel()
    assert upstream.last("subscriptions/listen").params["notifications"] == {"toolsListChanged": True}
    assert downstream.methods() == ["notifications/tools/list_changed"]
    assert changed == ["notifications/tools/list_changed"]


async def test_legacy_to_modern_declares_the_list_changes_the_listen_stream_delivers() -> None:
    """A modern server's listChanged flags follow its own rules; a session-era client is told
    what the proxy's listen stream was acknowledged for, and gets those notifications."""
    upstream = FakeUpstream(era="modern", capabilities={"tools": {"listChanged": False}, "prompts": {}})
    listening = anyio.Event()

    async def listen(call: FakeCall) -> Any:
        assert call.on_related is not None
        accepted = {key: True for key, value in call.params["notifications"].items() if value is True}
        await call.on_related(
            jsonrpc.notification("notifications/subscriptions/acknowledged", {"notifications": accepted})
        )
        await call.on_related(jsonrpc.notification("notifications/tools/list_changed", {}))
        listening.set()
        await anyio.sleep_forever()

    upstream.handlers["subscriptions/listen"] = listen
    downstream = FakeClient()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            link = UpstreamLink(upstream, Client("legacy"), downstream.peer, tg)
            handshake = body(await link.initialize_for_client({"protocolVersion": "2025-06-18"}, passthrough=True))
            await listening.wait()
            tg.cancel_scope.cancel()
    assert upstream.last("subscriptions/listen").params["notifications"] == {
        "toolsListChanged": True,
        "promptsListChanged": True,
    }
    assert handshake["capabilities"] == {"tools": {"listChanged": True}, "prompts": {"listChanged": True}}
    assert downstream.methods() == ["notifications/tools/list_changed"]


async def test_legacy_to_legacy_passes_the_clients_own_initialize_through() -> None:
    upstream = FakeUpstream(era="legacy", capabilities={"tools": {}, "tasks": {}})
    client = Client("legacy", {"sampling": {}})
    own = {"protocolVersion": "2025-03-26", "capabilities": {"sampling": {}}, "clientInfo": {"name": "cli"}}
    async with link_to(upstream, client) as link:
        handshake = await link.initialize_for_client(own, passthrough=True)
        reply = await link.forward("tools/list", params(), client, None)
    assert upstream.last("initialize").params == own
    assert body(handshake)["protocolVersion"] == "2025-03-26"
    assert body(handshake)["capabilities"] == {"tools": {}, "tasks": {}}  # nothing to translate
    assert "resultType" not in body(reply) and upstream.last("tools/list").params == {}


async def test_legacy_to_legacy_relays_server_requests_with_the_upstreams_id() -> None:
    upstream = FakeUpstream(era="legacy")

    async def samples(call: FakeCall) -> Any:
        answer = await upstream.ask("sampling/createMessage", {"messages": [], "maxTokens": 5})
        return {"content": [{"type": "text", "text": body(answer)["model"]}]}

    upstream.handlers["tools/call"] = samples
    client = Client("legacy", {"sampling": {}})
    downstream = FakeClient({"sampling/createMessage": {"model": "m1", "role": "assistant"}})
    async with link_to(upstream, client, downstream) as link:
        await link.initialize_for_client({"capabilities": {"sampling": {}}}, passthrough=True)
        reply = body(await link.forward("tools/call", params(name="write"), client, None))
    assert reply["content"][0]["text"] == "m1"
    (asked,) = downstream.sent
    assert jsonrpc.method_of(asked) == "sampling/createMessage"
    assert jsonrpc.id_of(upstream.replies[0]) == 9001  # the client's reply, under the upstream's id


# -- what all four share -----------------------------------------------------------------------


async def test_a_legacy_upstream_is_described_for_modern_clients() -> None:
    upstream = FakeUpstream(era="legacy", capabilities={"tools": {}, "tasks": {}}, instructions="Hi.")
    async with link_to(upstream, Client("modern")) as link:
        described = await link.describe_for_modern()
    assert described["capabilities"] == {"tools": {}}  # core tasks are not bridged
    assert described["_meta"] == {eras.META_SERVER_INFO: {"name": "fake", "version": "1.0"}}
    assert described["instructions"] == "Hi." and described["ttlMs"] == 0 and described["cacheScope"] == "private"
    assert described["supportedVersions"] == list(eras.MODERN_VERSIONS)


async def test_an_upstream_refusing_the_proxys_initialize_is_a_bridge_error() -> None:
    upstream = FakeUpstream(era="legacy")

    async def refuse(call: FakeCall) -> Any:
        return jsonrpc.error(None, jsonrpc.INVALID_PARAMS, "unsupported version")

    upstream.handlers["initialize"] = refuse
    async with link_to(upstream, Client("modern")) as link:
        with pytest.raises(BridgeError, match="refused initialize: unsupported version"):
            await link.forward("tools/list", params(_meta=MODERN_META), Client("modern"), None)
        assert upstream.initialize_params is None  # the next request tries again


@pytest.mark.parametrize(
    ("client", "delivered"),
    [
        (Client("legacy"), ["notifications/tools/list_changed", "notifications/message"]),
        (Client("modern"), []),  # list changes go to listen streams that opted in; no log level set
        (Client("modern", log_level="info"), ["notifications/message"]),
    ],
)
async def test_unasked_notifications_reach_the_client_its_era_s_way(client: Client, delivered: list[str]) -> None:
    upstream = FakeUpstream(era="legacy")
    changed: list[str | None] = []

    async def on_change(link: UpstreamLink, frame: Frame) -> None:
        changed.append(jsonrpc.method_of(frame))

    downstream = FakeClient()
    with deadline(5):
        async with anyio.create_task_group() as tg:
            UpstreamLink(upstream, client, downstream.peer, tg, on_change=on_change)
            await upstream.tell("notifications/tools/list_changed", {})
            await upstream.tell("notifications/message", {"level": "info", "data": "hi"})
            tg.cancel_scope.cancel()
    assert downstream.methods() == delivered
    assert changed == ["notifications/tools/list_changed"]  # the catalog hears of it in every era


# -- a connection that follows its one client's era ----------------------------------------------

LEGACY_INIT = {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "c"}}


async def test_a_following_connection_chooses_no_era_before_its_client_speaks() -> None:
    upstream = FakeUpstream(era="dual")
    upstream.follow_client()
    async with link_to(upstream, Client()):
        await upstream.ensure_ready()
        assert upstream.running and upstream.era is None
    assert upstream.calls == []  # not probed: a dual-era server keeps the era of its first request


async def test_a_session_era_client_reaches_a_dual_era_upstream_through_its_own_initialize() -> None:
    """The client's initialize goes first (no discover probe), so the server serves the session
    era and its server-to-client requests reach the client, as directly."""
    upstream = FakeUpstream(era="dual")
    upstream.follow_client()
    client = Client("legacy", LEGACY_INIT["capabilities"])
    downstream = FakeClient({"elicitation/create": {"action": "accept", "content": {"name": "Ada"}}})

    async def elicits(call: FakeCall) -> Any:
        answer = await upstream.ask("elicitation/create", {"message": "Name?", "requestedSchema": {}})
        return {"content": [{"type": "text", "text": body(answer)["content"]["name"]}]}

    upstream.handlers["tools/call"] = elicits
    async with link_to(upstream, client, downstream) as link:
        reply = await link.initialize_for_client(LEGACY_INIT, passthrough=True)
        called = await link.forward("tools/call", params(name="ask"), client, None)
    assert upstream.methods() == ["initialize", "tools/call"]
    assert upstream.last("initialize").params == LEGACY_INIT
    assert upstream.era == "legacy" and upstream.locked == "legacy"
    assert body(reply)["serverInfo"]["name"] == "fake"
    assert body(called)["content"][0]["text"] == "Ada"
    assert downstream.methods() == ["elicitation/create"]


async def test_a_session_era_client_of_a_modern_only_upstream_is_described_from_discover() -> None:
    upstream = FakeUpstream(era="modern")
    upstream.follow_client("legacy")
    async with link_to(upstream, Client("legacy")) as link:
        reply = await link.initialize_for_client(LEGACY_INIT, passthrough=True)
        await link.forward("tools/list", params(), Client("legacy"), None)
        await upstream.shutdown()  # restarted by the next request: probed, not initialized again
        await link.forward("tools/list", params(), Client("legacy"), None)
    assert upstream.methods()[:2] == ["initialize", "server/discover"]  # refused, then probed
    assert upstream.methods().count("initialize") == 1
    assert upstream.methods().count("server/discover") == 2
    assert upstream.era == "modern"
    assert body(reply)["protocolVersion"] == "2025-11-25" and body(reply)["serverInfo"]["name"] == "fake"
    assert eras.META_VERSION in upstream.last("tools/list").params["_meta"]  # stamped for the modern upstream


async def test_a_modern_client_of_a_following_dual_era_upstream_probes_it() -> None:
    upstream = FakeUpstream(era="dual")
    upstream.follow_client()
    async with link_to(upstream, Client()) as link:
        await link.forward("tools/list", params(_meta=MODERN_META), Client("modern"), None)
    assert upstream.methods() == ["server/discover", "tools/list"]
    assert upstream.era == "modern" and upstream.locked == "modern"


async def test_a_request_past_the_links_deadline_is_cancelled_upstream_and_names_the_knob() -> None:
    upstream = FakeUpstream("slow")
    never = anyio.Event()

    async def stuck(call: FakeCall) -> Any:
        await never.wait()

    upstream.handlers["resources/read"] = stuck
    async with linked([upstream], Client("modern")) as (link,):
        link.deadline = 0.2
        with pytest.raises(UpstreamTimeout) as caught:
            await link.forward("resources/read", {"uri": jsonrpc.raw("x://y")}, Client("modern"), None)
    assert upstream.cancelled == ["resources/read"]
    message = str(caught.value)
    assert "'slow'" in message and "0.2 s" in message
    assert "upstreams.slow.timeout" in message and "limits.call_timeout" in message


def test_what_a_modern_client_declared_is_what_a_session_era_upstream_is_told() -> None:
    declared = {"elicitation": {"url": {}}, "sampling": {"tools": {}}, "roots": {}, "experimental": {"x": {}}}
    assert bridged_capabilities(declared) == {
        "elicitation": {"url": {}},
        "sampling": {"tools": {}},
        "roots": {"listChanged": True},  # the proxy sends list_changed when the client's roots arrive
    }
    assert bridged_capabilities({"elicitation": {}}) == {"elicitation": {"form": {}}}  # {} means form
    assert bridged_capabilities({}) == {}
    assert covers({"elicitation": {"form": {}, "url": {}}}, {"elicitation": {"url": {}}})
    assert not covers({"elicitation": {"form": {}}}, {"elicitation": {"url": {}}})
    assert widened({"elicitation": {"form": {}}}, {"elicitation": {"url": {}}, "sampling": {}}) == {
        "elicitation": {"form": {}, "url": {}},
        "sampling": {},
    }
