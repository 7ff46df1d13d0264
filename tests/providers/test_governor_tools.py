"""The governor's own tools, called as the agent calls them: byte-exact slices that reassemble a
spill, clean error codes, a tampered spill caught, shaping on request, receipts verified; each
answer in structuredContent and again as its JSON text."""

from __future__ import annotations

import base64
import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frugal_proxy.governor.engine import Governor
from frugal_proxy.protocol import jsonrpc
from frugal_proxy.providers.governor_tools import governor_tools
from frugal_proxy.providers.own_tools import OwnToolProvider, ToolArgumentError
from tests.fake_clock import Clock
from tests.governed import call_tool, exchange, fetch_all, governed, make_governor, sdk_string
from tests.pace import deadline

pytestmark = pytest.mark.anyio


async def spilled(governor: Governor, text: str) -> str:
    """The artifact id of a result the governor shaped and spilled."""
    result = await governed(governor, exchange("blob", {"n": 1}, sdk_string(text)))
    return str(result["_meta"]["frugal/governor"]["receipts"][0]["artifact_id"])


def test_the_three_tools_and_what_they_require() -> None:
    tools = governor_tools(make_governor())
    assert [(t.name, t.input_schema["required"]) for t in tools] == [
        ("frugal__fetch_slice", ["artifact_id"]),
        ("frugal__verify_receipt", ["receipt"]),
        ("frugal__shape_result", ["route"]),
    ]
    assert all(t.description and t.listing()["inputSchema"]["type"] == "object" for t in tools)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(alphabet=st.sampled_from(list("aé東🌊 \n")), min_size=2000, max_size=6000),
    limits=st.lists(st.integers(min_value=1, max_value=3000), min_size=1, max_size=5),
    start=st.integers(min_value=0, max_value=20_000),
)
def test_slices_reassemble_the_original_byte_for_byte(text: str, limits: list[int], start: int) -> None:
    async def run() -> None:
        governor = make_governor(max_bytes=1024, max_tokens=256)
        result = await governed(governor, exchange("t", {}, {"content": [{"type": "text", "text": text}]}))
        (receipt,) = result["_meta"]["frugal/governor"]["receipts"]
        payload = text.encode()
        kept = result["content"][0]["text"].rsplit("[frugal:", 1)[0].rstrip("\n")
        assert payload.startswith(kept.encode()) or text.endswith("\n")
        assert await fetch_all(governor, receipt["artifact_id"], limits) == payload
        offset = min(start, len(payload))
        answer = await call_tool(
            governor, "frugal__fetch_slice", {"artifact_id": receipt["artifact_id"], "offset": offset, "limit": 50}
        )
        chunk = base64.b64decode(answer["structuredContent"]["data_base64"])
        assert payload[offset : offset + len(chunk)] == chunk

    anyio.run(run)


async def test_fetch_errors_are_clean() -> None:
    clock = Clock()
    governor = make_governor(clock, spill_ttl=60)
    result = await governed(governor, exchange("blob", {"n": 1}, sdk_string("x " * 50_000)))
    artifact_id = result["_meta"]["frugal/governor"]["receipts"][0]["artifact_id"]
    cases = [
        ({"artifact_id": artifact_id, "offset": 10**9}, "invalid_slice_range"),
        ({"artifact_id": artifact_id, "limit": 0}, "invalid_slice_range"),
        ({"artifact_id": artifact_id, "offset": "x"}, "invalid_slice_range"),
        ({"artifact_id": "art_nope"}, "unknown_artifact"),
        ({}, "artifact_id"),
    ]
    for arguments, code in cases:
        with pytest.raises(ToolArgumentError, match=code):
            await call_tool(governor, "frugal__fetch_slice", arguments)
    with pytest.raises(ToolArgumentError, match="unknown_artifact"):
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id}, operator="someone-else")
    clock.now += 61
    with pytest.raises(ToolArgumentError, match="artifact_expired"):
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id})


async def test_a_tampered_spill_fails_its_sha256_check() -> None:
    governor = make_governor()
    result = await governed(governor, exchange("blob", {}, sdk_string("y " * 50_000)))
    artifact_id = result["_meta"]["frugal/governor"]["receipts"][0]["artifact_id"]
    artifact = await governor.store.get("local", artifact_id)
    artifact.payload = b"z" + artifact.payload[1:]
    with pytest.raises(ToolArgumentError, match="artifact_corrupt"):
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id})


async def test_shape_result_tool_shapes_text_and_envelopes() -> None:
    governor = make_governor()
    answer = await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "word " * 20_000})
    report = answer["structuredContent"]
    assert report["truncated"] is True and report["chars_total"] == 100_000
    (receipt,) = report["receipts"]
    assert await fetch_all(governor, receipt["artifact_id"], [20_000]) == ("word " * 20_000).encode()
    small = await call_tool(governor, "frugal__shape_result", {"route": "x", "result": sdk_string("hi")})
    assert small["structuredContent"]["result"] == sdk_string("hi") and "truncated" not in small["structuredContent"]
    capped = await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "w " * 2000, "max_chars": 1000})
    assert capped["structuredContent"]["chars_returned"] <= 1000
    with pytest.raises(ToolArgumentError):
        await call_tool(governor, "frugal__shape_result", {"route": "x"})


async def test_every_answer_is_structured_and_its_json_text_is_the_same() -> None:
    governor = make_governor()
    artifact_id = await spilled(governor, "é" * 40_000)
    answers = [
        await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id, "limit": 100}),
        await call_tool(governor, "frugal__verify_receipt", {"receipt": {"route": "x"}}),
        await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "hi"}),
    ]
    for answer in answers:
        (text,) = answer["content"]
        assert json.loads(text["text"]) == answer["structuredContent"]
        assert {"chars_returned", "chars_total", "est_tokens"} <= set(answer["structuredContent"])


async def test_a_slice_is_cut_on_a_character_and_capped_by_max_chars() -> None:
    governor = make_governor()
    artifact_id = await spilled(governor, "é" * 40_000)  # two bytes a character
    odd = (await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id, "limit": 5}))[
        "structuredContent"
    ]
    assert odd["returned_bytes"] == 4 and odd["text"] == "éé" and odd["next_offset"] == 4
    inside = await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id, "offset": 1, "limit": 8})
    assert "text" not in inside["structuredContent"]  # starts inside a character: bytes only
    capped = await call_tool(governor, "frugal__fetch_slice", {"artifact_id": artifact_id, "max_chars": 10})
    assert capped["structuredContent"]["returned_bytes"] == 10 and capped["structuredContent"]["truncated"] is True


async def test_bad_arguments_name_what_to_send() -> None:
    governor = make_governor()
    with pytest.raises(ToolArgumentError, match=r"^invalid_arguments: send \{\"receipt\""):
        await call_tool(governor, "frugal__verify_receipt", {"receipt": "signed"})
    with pytest.raises(ToolArgumentError, match="exactly one of text"):
        await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "a", "result": {"content": []}})
    with pytest.raises(ToolArgumentError, match="max_chars must be an integer"):
        await call_tool(governor, "frugal__shape_result", {"route": "x", "text": "a", "max_chars": True})


async def test_a_refusal_reaches_the_agent_as_a_tool_error_with_its_code() -> None:
    provider = OwnToolProvider(governor_tools(make_governor()))
    ex = exchange("frugal__fetch_slice", {"artifact_id": "art_gone"})
    with deadline(5):
        outcome = await provider.call(ex)
    assert outcome.kind == "ok" and outcome.reply is not None
    result: dict[str, Any] = jsonrpc.decode_any(outcome.reply["result"])
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("frugal__fetch_slice: unknown_artifact: ")


async def test_a_bad_max_chars_on_shape_result_is_invalid_arguments() -> None:
    with pytest.raises(ToolArgumentError, match=r"^invalid_arguments: "):
        await call_tool(make_governor(), "frugal__shape_result", {"route": "x", "text": "a", "max_chars": "ten"})
