"""GrantedRoots: what a session-era upstream is told of a 2026-07-28 client's roots."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from frugal_proxy.bridge.link import Client, UpstreamLink
from frugal_proxy.bridge.roots import GrantedRoots, roots_of
from frugal_proxy.errors import UpstreamTimeout
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from tests.fake_peers import FakeCall, FakeUpstream, linked
from tests.pace import deadline

pytestmark = pytest.mark.anyio

SUB = [{"uri": "file:///data/sub"}]


def answered(upstream: FakeUpstream) -> list[Any]:
    return [jsonrpc.decode_any(reply["result"]) for reply in upstream.replies]


async def test_unknown_roots_are_answered_with_none_and_asked_of_the_client() -> None:
    upstream = FakeUpstream(era="legacy")
    roots = GrantedRoots(upstream)
    await roots.answer(jsonrpc.request(1, "roots/list", {}))
    assert answered(upstream) == [{"roots": []}] and roots.answers_here
    question = roots.question()
    assert question is not None and question.method == "roots/list"


async def test_a_refused_question_grants_nothing_and_asks_no_more() -> None:
    upstream = FakeUpstream(era="legacy")
    roots = GrantedRoots(upstream)
    await roots.answer(jsonrpc.request(1, "roots/list", {}))
    question = roots.question()
    assert question is not None
    with deadline(5):
        await question.answered(jsonrpc.error("q", jsonrpc.INTERNAL_ERROR, "no"))
    assert roots.known == [] and roots.question() is None
    assert upstream.notifications == []  # the upstream already holds nothing


async def test_roots_delivered_in_a_call_are_what_the_upstream_holds() -> None:
    upstream = FakeUpstream(era="legacy")
    roots = GrantedRoots(upstream)
    await roots.delivered(jsonrpc.result(5, {"roots": SUB}))
    await roots.answer(jsonrpc.request(2, "roots/list", {}))
    assert answered(upstream) == [{"roots": SUB}] and not roots.answers_here


def test_roots_of_reads_only_a_well_formed_answer() -> None:
    assert roots_of(jsonrpc.result(1, {"roots": SUB})) == SUB
    assert roots_of(jsonrpc.result(1, {"roots": "x"})) is None
    assert roots_of(jsonrpc.error(1, -1, "no")) is None


# -- a roots-capable 2026-07-28 client's first call, through a link ----------------------------

GRANTED = [{"uri": "file:///data/sub", "name": "sub"}]
MODERN_META = {eras.META_VERSION: eras.LATEST_MODERN, eras.META_CAPABILITIES: {"roots": {}}}
ROOTS_CLIENT = Client("modern", {"roots": {}})


def params(**values: Any) -> dict[str, Any]:
    return {key: jsonrpc.raw(value) for key, value in values.items()}


async def first_call(link: UpstreamLink) -> Any:
    """The client's first tools/call: asked for its roots, it retries with GRANTED."""
    await link.forward("tools/list", params(_meta=MODERN_META), ROOTS_CLIENT, None)  # initializes it
    first = body(await link.forward("tools/call", params(name="read", _meta=MODERN_META), ROOTS_CLIENT, None))
    ((key, asked),) = first["inputRequests"].items()
    assert asked["method"] == "roots/list"
    retry = params(
        name="read", _meta=MODERN_META, requestState=first["requestState"], inputResponses={key: {"roots": GRANTED}}
    )
    return body(await link.forward("tools/call", retry, ROOTS_CLIENT, None))


def body(reply: Frame) -> Any:
    return jsonrpc.decode_any(reply["result"])


def reading(upstream: FakeUpstream, seen: list[Any]) -> None:
    async def reads(call: FakeCall) -> Any:
        seen.append(answered(upstream))
        return {"content": [{"type": "text", "text": "read"}]}

    upstream.handlers["tools/call"] = reads


async def test_an_upstream_that_asks_before_it_answers_a_ping_holds_the_roots_before_the_call() -> None:
    """No clock decides it: however long the upstream takes to ask, the call waits for the ask
    or for a ping answered without one, and the roots are in place before the call goes up."""
    upstream = FakeUpstream(era="legacy")
    seen: list[Any] = []
    reading(upstream, seen)

    async def asks_then_pongs(call: FakeCall) -> Any:
        await upstream.ask("roots/list", {})  # what it had queued before the ping, as sent
        return {}

    upstream.handlers["ping"] = asks_then_pongs
    async with linked([upstream], ROOTS_CLIENT) as (link,):
        final = await first_call(link)
    assert final["content"][0]["text"] == "read"
    assert seen == [[{"roots": GRANTED}]]
    assert upstream.methods().index("ping") < upstream.methods().index("tools/call")


async def test_an_upstream_that_never_asks_gets_the_call_once_its_ping_is_answered() -> None:
    upstream = FakeUpstream(era="legacy")
    seen: list[Any] = []
    reading(upstream, seen)
    async with linked([upstream], ROOTS_CLIENT) as (link,):
        final = await first_call(link)
    assert final["content"][0]["text"] == "read" and seen == [[]]
    assert [m for m in upstream.methods() if m in ("ping", "tools/call")] == ["ping", "tools/call"]
    assert "notifications/roots/list_changed" not in dict(upstream.notifications)  # it holds none to change


async def test_the_wait_for_an_upstream_that_does_not_answer_is_bounded_by_the_call_deadline() -> None:
    upstream = FakeUpstream(era="legacy")

    async def never_answers(call: FakeCall) -> Any:
        await anyio.sleep_forever()

    upstream.handlers["ping"] = never_answers
    async with linked([upstream], ROOTS_CLIENT, seconds=10) as (link,):
        link.deadline = 0.5
        with pytest.raises(UpstreamTimeout, match=r"did not answer within 0\.5 s"):
            await first_call(link)
    assert upstream.cancelled == ["ping"]  # cancelled upstream at the deadline
    assert "tools/call" not in upstream.methods()  # and the call the client was told ended never went up
