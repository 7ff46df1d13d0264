"""The MCP header rules, without a socket: what a 2026-07-28 request states in its headers,
whether the `Mcp-Param-*` headers a client sent agree with its arguments, and how an `Accept`
header is weighed."""

from __future__ import annotations

from typing import Any

import pytest

from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.headers import (
    accept_weights,
    decode_header_value,
    encode_header_value,
    header_params,
    learn_param_headers,
    mirrored_params,
    modern_headers,
    param_header_problem,
)

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "x-mcp-header": "City"},
        "options": {"type": "object", "properties": {"units": {"type": "string", "x-mcp-header": "Units"}}},
        "days": {"type": "integer", "x-mcp-header": "Days"},
        "plain": {"type": "string"},
    },
}
WEATHER = header_params(WEATHER_SCHEMA)


@pytest.mark.parametrize("value", ["plain ascii", "héllo", " padded", "line\nbreak", "=?base64?eA==?=", ""])
def test_a_header_value_survives_the_round_trip(value: str) -> None:
    encoded = encode_header_value(value)
    assert encoded.isascii() and "\n" not in encoded
    assert decode_header_value(encoded) == value


def test_printable_ascii_goes_as_it_is_and_a_bad_base64_form_decodes_to_none() -> None:
    assert encode_header_value("add") == "add"
    assert encode_header_value("héllo") == "=?base64?aMOpbGxv?="
    assert decode_header_value("=?base64?not base64!?=") is None


def test_modern_headers_state_the_version_method_and_name() -> None:
    meta = {eras.META_VERSION: "2026-07-28"}
    assert modern_headers("tools/list", {"_meta": meta}, {}) == {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    }
    read = modern_headers("resources/read", jsonrpc.raw({"uri": "file:///é"}), {})
    assert read["MCP-Protocol-Version"] == eras.LATEST_MODERN  # no _meta: the latest
    assert read["Mcp-Name"] == encode_header_value("file:///é")


def test_a_tools_call_mirrors_its_annotated_arguments_and_forwards_the_unknown_ones() -> None:
    params: dict[str, Any] = {
        "name": "weather",
        "arguments": {"city": "Zürich", "options": {"units": "metric"}, "days": 3, "plain": "x"},
    }
    forwarded = {"Mcp-Param-Extra": "kept", "mcp-param-city": "not this one"}
    headers = modern_headers("tools/call", params, {"weather": WEATHER}, forwarded)
    assert headers["Mcp-Name"] == "weather"
    assert headers["Mcp-Param-City"] == encode_header_value("Zürich")
    assert (headers["Mcp-Param-Units"], headers["Mcp-Param-Days"]) == ("metric", "3")
    assert headers["Mcp-Param-Extra"] == "kept" and "mcp-param-city" not in headers
    assert "Mcp-Param-Extra" not in modern_headers("tools/list", {}, {}, forwarded)


def test_annotations_are_found_by_path_and_learned_from_a_tool_list() -> None:
    assert WEATHER == {("city",): "City", ("options", "units"): "Units", ("days",): "Days"}
    tools = {"tools": [{"name": "weather", "inputSchema": WEATHER_SCHEMA}, {"name": "plain", "inputSchema": {}}]}
    learned: dict[str, dict[tuple[str, ...], str]] = {}
    learn_param_headers(jsonrpc.result(1, tools), learned)
    assert learned == {"weather": WEATHER}
    learn_param_headers(jsonrpc.error(2, jsonrpc.INTERNAL_ERROR, "no"), learned)  # an error teaches nothing
    assert list(learned) == ["weather"]


def test_only_values_with_a_header_form_are_mirrored() -> None:
    arguments = {"city": None, "options": {"units": ["a"]}, "days": True}
    assert mirrored_params(WEATHER, arguments) == {"Mcp-Param-Days": "true"}


@pytest.mark.parametrize(
    ("arguments", "sent", "problem"),
    [
        ({"city": "Oslo", "days": 2}, [("mcp-param-city", "Oslo"), ("mcp-param-days", "2")], None),
        ({"days": 2.0}, [("mcp-param-days", "2")], None),  # numbers compare as numbers
        ({"city": "Zürich"}, [("mcp-param-city", "=?base64?WsO8cmljaA==?=")], None),
        ({"city": "Oslo"}, [], "Mcp-Param-City header is missing but the argument 'city' is present"),
        ({}, [("mcp-param-city", "Oslo")], "Mcp-Param-City header is sent but the argument 'city' is absent"),
        ({"city": "Oslo"}, [("mcp-param-city", "Oslo")] * 2, "Mcp-Param-City header is sent more than once"),
        ({"city": "Oslo"}, [("mcp-param-city", "Bergen")], "Mcp-Param-City header does not match the argument"),
        ({"city": "Oslo"}, [("mcp-param-city", "=?base64?!!?=")], "Mcp-Param-City header carries a malformed"),
    ],
)
def test_a_param_header_problem_names_the_header_and_the_argument(
    arguments: dict[str, Any], sent: list[tuple[str, str]], problem: str | None
) -> None:
    found = param_header_problem(WEATHER, arguments, sent)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_accept_weights_lists_each_range_with_its_q_or_one() -> None:
    assert accept_weights("application/json, text/event-stream") == [
        ("application/json", 1.0),
        ("text/event-stream", 1.0),
    ]
    assert accept_weights(" Text/Event-Stream ; charset=utf-8 ; Q=0.5 ,application/json;q=0.250") == [
        ("text/event-stream", 0.5),
        ("application/json", 0.25),
    ]
    assert accept_weights("application/json;q=0, text/*;q=1.000, */*;q=0.") == [
        ("application/json", 0.0),
        ("text/*", 1.0),
        ("*/*", 0.0),
    ]
    assert accept_weights("") == [] and accept_weights(" , ;q=1") == []


@pytest.mark.parametrize("weight", ["oops", "", "2", "1.5", "-1", "nan", "inf", "1e-3", '"0.5"'])
def test_a_malformed_q_is_ignored_and_the_range_keeps_weight_one(weight: str) -> None:
    """RFC 9110's weight is 0 to 1 with up to three decimals; anything else is a malformed
    parameter, ignored: the range is neither ruled out nor ranked below the others."""
    assert accept_weights(f"text/event-stream;q={weight}")[0] == ("text/event-stream", 1.0)
