"""GrantedRoots: what a session-era upstream is told of a 2026-07-28 client's roots."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from frugal_proxy.bridge.roots import GrantedRoots, roots_of
from frugal_proxy.protocol import jsonrpc
from tests.fake_peers import FakeUpstream

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
    with anyio.fail_after(5):
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
