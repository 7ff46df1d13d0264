"""The proxy's own tools as a provider: listed as tools/list shows them, run with the call's
arguments and exchange, and every failure a tool result the agent can read."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.own_tools import PROVIDER_NAME, OwnTool, OwnToolProvider, ToolArgumentError
from frugal_proxy.records import Call, Exchange, Route
from tests.pace import deadline

pytestmark = pytest.mark.anyio


async def add(arguments: dict[str, Any], exchange: Exchange) -> dict[str, Any]:
    if not isinstance(arguments.get("a"), int):
        raise ToolArgumentError('send {"a": <integer>}')
    return {"content": [{"type": "text", "text": f"{arguments['a'] + 1} for {exchange.operator}"}]}


ADD = OwnTool("frugal__add", "Add one.", {"type": "object"}, add, output_schema={"type": "object"})
PLAIN = OwnTool("frugal__plain", "No output schema.", {"type": "object"}, add)


async def called(arguments: msgspec.Raw | None) -> dict[str, Any]:
    params = {"name": jsonrpc.raw("frugal__add")}
    if arguments is not None:
        params["arguments"] = arguments
    exchange = Exchange(Call(1, "frugal__add", params), Route("frugal__add", (PROVIDER_NAME,)), operator="ada")
    with deadline(5):
        outcome = await OwnToolProvider([ADD]).call(exchange)
    assert outcome.kind == "ok" and outcome.reply is not None
    return jsonrpc.decode_any(outcome.reply["result"])  # type: ignore[no-any-return]


def test_the_tools_are_listed_with_their_schemas() -> None:
    provider = OwnToolProvider([ADD, PLAIN])
    assert (provider.name, provider.spec.price_micros, provider.spec.capability) == ("frugal", 0, "tool")
    assert "frugal__add" in provider and "add" not in provider
    assert provider.listings() == [
        {
            "name": "frugal__add",
            "description": "Add one.",
            "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object"},
        },
        {"name": "frugal__plain", "description": "No output schema.", "inputSchema": {"type": "object"}},
    ]


async def test_a_tool_runs_with_the_calls_arguments_and_exchange() -> None:
    answer = await called(jsonrpc.raw({"a": 41}))
    assert answer == {"content": [{"type": "text", "text": "42 for ada"}], "resultType": "complete"}


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (jsonrpc.raw([1]), "frugal__add: arguments must be a JSON object"),
        (None, 'frugal__add: send {"a": <integer>}'),
        (jsonrpc.raw({"a": "x"}), 'frugal__add: send {"a": <integer>}'),
    ],
)
async def test_unusable_arguments_are_a_tool_error_naming_the_tool(arguments: msgspec.Raw | None, text: str) -> None:
    answer = await called(arguments)
    assert answer["isError"] is True and answer["content"][0]["text"] == text
    assert answer["resultType"] == "complete"
