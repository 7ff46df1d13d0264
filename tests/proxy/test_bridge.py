"""The MRTR bridge for session-era clients, without sockets: a modern upstream's `input_required`
answer asked of the client and retried upstream with the answers."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from frugal_proxy import jsonrpc
from frugal_proxy.bridge import fulfil_input_required
from frugal_proxy.downstream import ClientGone
from frugal_proxy.jsonrpc import Frame

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
