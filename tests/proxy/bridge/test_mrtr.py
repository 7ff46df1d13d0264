"""The MRTR bridge for session-era clients, without sockets: a modern upstream's `input_required`
answer asked of the client and retried upstream with the answers."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest

from frugal_proxy.bridge import mrtr
from frugal_proxy.bridge.downstream import ClientGone
from frugal_proxy.bridge.mrtr import HeldCalls, Question, fulfil_input_required
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from tests.pace import deadline

pytestmark = pytest.mark.anyio

ASKING = {
    "resultType": "input_required",
    "inputRequests": {
        "name": {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {}}},
        "model": {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}},
    },
    "requestState": "opaque",
}
CAPABILITIES: dict[str, Any] = {"elicitation": {}, "sampling": {}}


async def test_answers_are_sent_back_upstream_with_the_state() -> None:
    sent: list[dict[str, Any]] = []

    async def ask(method: str, params: Any) -> Frame:
        return jsonrpc.result(1, {"action": "accept", "content": {"name": "Ada"}} if "elicitation" in method else {})

    async def retry(params: dict[str, msgspec.Raw]) -> Frame:
        sent.append({key: jsonrpc.decode_any(value) for key, value in params.items()})
        return jsonrpc.result(7, {"content": [{"type": "text", "text": "done"}]})

    params = {"name": jsonrpc.raw("tool")}
    reply = await fulfil_input_required(
        jsonrpc.result(7, ASKING), params, capabilities=CAPABILITIES, ask=ask, retry=retry
    )
    assert jsonrpc.decode_any(reply["result"])["content"][0]["text"] == "done"
    assert sent == [
        {
            "name": "tool",
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}, "model": {}},
            "requestState": "opaque",
        }
    ]


async def test_a_client_that_cannot_be_asked_raises_client_gone_itself() -> None:
    """Not an ExceptionGroup from the task group that asks the questions side by side: the
    session's handlers match ClientGone, and a group would reach the client as an internal error."""

    async def ask(method: str, params: Any) -> Frame:
        raise ClientGone

    async def retry(params: dict[str, msgspec.Raw]) -> Frame:
        raise AssertionError("nothing to retry with")

    with pytest.raises(ClientGone):
        await fulfil_input_required(jsonrpc.result(7, ASKING), {}, capabilities=CAPABILITIES, ask=ask, retry=retry)


class _SlowUpstream:
    """An upstream call that reports progress when told to and answers when told to; the
    replies the proxy sends it (answers to its server requests) are recorded."""

    def __init__(self) -> None:
        self.step = anyio.Event()
        self.finish = anyio.Event()
        self.replies: list[Frame] = []

    async def send_reply(self, frame: Frame) -> None:
        self.replies.append(frame)

    async def request(self, method: str, params: Any, *, on_progress: Any = None) -> Frame:
        await self.step.wait()
        await on_progress({"progress": jsonrpc.raw(1)})
        await self.finish.wait()
        await on_progress({"progress": jsonrpc.raw(2)})
        return jsonrpc.result(1, {"content": [], "resultType": "complete"})


async def test_progress_between_two_legs_reaches_the_next_leg() -> None:
    """A server request ends the first leg with input_required; progress the upstream reports
    before the client's retry must reach the retry's stream, not the answered first one."""
    upstream = _SlowUpstream()
    first: list[int] = []
    second: list[int] = []

    async def sink(into: list[int], params: dict[str, msgspec.Raw]) -> None:
        into.append(jsonrpc.decode_any(params["progress"]))

    async with anyio.create_task_group() as tg:
        held = HeldCalls(upstream, tg)  # type: ignore[arg-type]
        leg: list[Frame] = []

        async def first_leg() -> None:
            leg.append(await held.call("tools/call", {}, {"roots": {}}, lambda p: sink(first, p)))

        tg.start_soon(first_leg)
        await anyio.wait_all_tasks_blocked()
        await held.attach(jsonrpc.request(50, "roots/list", {}))
        await anyio.wait_all_tasks_blocked()
        asking = jsonrpc.decode_any(leg[0]["result"])
        assert asking["resultType"] == "input_required"
        upstream.step.set()  # progress 1 arrives while no leg is open
        await anyio.wait_all_tasks_blocked()
        (key,) = asking["inputRequests"]
        retry = {
            "requestState": jsonrpc.raw(asking["requestState"]),
            "inputResponses": jsonrpc.raw({key: {"roots": []}}),
        }
        upstream.finish.set()
        final = await held.call("tools/call", retry, {"roots": {}}, lambda p: sink(second, p))
    assert jsonrpc.decode_any(final["result"])["resultType"] == "complete"
    assert first == [] and second == [1, 2]
    assert jsonrpc.id_of(upstream.replies[0]) == 50


class _QuickUpstream:
    """An upstream call that answers at once; the calls it got are recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def send_reply(self, frame: Frame) -> None:
        raise AssertionError("no upstream request was asked")

    async def request(self, method: str, params: Any, *, on_progress: Any = None) -> Frame:
        self.calls.append(method)
        return jsonrpc.result(1, {"content": [], "resultType": "complete"})


async def test_a_call_goes_up_after_the_proxys_own_question_even_when_handling_it_fails() -> None:
    upstream = _QuickUpstream()
    answers: list[Frame] = []

    async def answered(reply: Frame) -> None:
        answers.append(reply)
        raise RuntimeError("the upstream went away")

    with deadline(5):
        async with anyio.create_task_group() as tg:
            held = HeldCalls(upstream, tg)  # type: ignore[arg-type]
            question = Question("roots/list", {}, answered)
            first = jsonrpc.decode_any(
                (await held.call("tools/call", {}, {"roots": {}}, None, first=question))["result"]
            )
            assert first["resultType"] == "input_required" and upstream.calls == []
            ((key, asked),) = first["inputRequests"].items()
            assert asked == {"method": "roots/list", "params": {}}
            retry = {
                "requestState": jsonrpc.raw(first["requestState"]),
                "inputResponses": jsonrpc.raw({key: {"roots": []}}),
            }
            final = await held.call("tools/call", retry, {"roots": {}}, None)
    assert jsonrpc.decode_any(final["result"])["resultType"] == "complete"
    assert upstream.calls == ["tools/call"] and jsonrpc.decode_any(answers[0]["result"]) == {"roots": []}


def test_an_input_response_that_is_a_handlers_error_goes_upstream_as_a_json_rpc_error() -> None:
    failed = mrtr.answer_for_upstream(7, jsonrpc.raw({"code": -32603, "message": "no terminal", "data": {"x": 1}}))
    assert jsonrpc.error_of(failed) == (-32603, "no terminal") and jsonrpc.id_of(failed) == 7
    wrapped = mrtr.answer_for_upstream(7, jsonrpc.raw({"error": {"code": -1, "message": "refused"}}))
    assert jsonrpc.error_of(wrapped) == (-1, "refused")
    for result in ({"action": "accept", "content": {"code": 3, "message": "hi"}}, {"code": "x", "message": "y"}):
        answered = mrtr.answer_for_upstream(7, jsonrpc.raw(result))
        assert "result" in answered and jsonrpc.decode_any(answered["result"]) == result
