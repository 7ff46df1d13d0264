"""The governor's engine without its policy: call fingerprints, per-operator budgets, shaping
that spills and signs, a payload over the spill quota, and the repeat denial it answers."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frugal_proxy.config import Budget, GovernorSettings
from frugal_proxy.governor import keys, receipts, shaping
from frugal_proxy.governor.engine import call_key, iso_time, raw_call_key
from frugal_proxy.protocol import jsonrpc
from tests.governed import make_governor, sdk_string
from tests.pace import deadline

pytestmark = pytest.mark.anyio

LARGE = jsonrpc.encode(sdk_string("word " * 20_000))


def test_a_call_is_known_by_its_route_and_arguments_in_any_key_order() -> None:
    assert call_key("read", {"a": 1, "b": [1, 2]}) == call_key("read", {"b": [1, 2], "a": 1})
    assert call_key("read", {"a": 1}) != call_key("write", {"a": 1})
    assert call_key("read", {"a": 1}) != call_key("read", {"a": "1"})
    assert iso_time(0) == "1970-01-01T00:00:00Z"


long_strings = st.builds(
    lambda head, count: head * count,
    st.text(alphabet=st.sampled_from(list('ab "\\/\n\té🌊\u2028\x7f')), min_size=1, max_size=8),
    st.integers(0, 2000),
)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    scalars | long_strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(arguments=st.dictionaries(st.sampled_from(["b", "a", "message", "é"]), values, max_size=4) | values)
def test_the_raw_fingerprint_is_the_decoded_ones(arguments: object) -> None:
    """Long strings without escapes are hashed as they came: the digest is the one of the
    arguments decoded, whatever their key order or spacing."""
    for raw in (json.dumps(arguments, ensure_ascii=False), json.dumps(arguments, indent=1, sort_keys=True)):
        assert raw_call_key("read", msgspec.Raw(raw.encode())) == call_key("read", json.loads(raw))
    assert raw_call_key("read", None) == call_key("read", {})


def test_a_long_plain_string_argument_is_fingerprinted_as_it_came() -> None:
    message = "é🌊 " + "x" * 3 * 1024 * 1024
    raw = msgspec.Raw(json.dumps({"z": [1, {"b": 2, "a": 1}], "message": message}, ensure_ascii=False).encode())
    assert raw_call_key("read", raw) == call_key("read", {"message": message, "z": [1, {"a": 1, "b": 2}]})
    assert raw_call_key("read", raw) != raw_call_key("read", msgspec.Raw(bytes(raw).replace(b"x", b"y", 1)))


def test_arguments_the_proxy_cannot_decode_have_the_fingerprint_of_none() -> None:
    for raw in (b'{"n": 1e999}', b'{"a": "x", "n": 123' + b"4" * 5000 + b"}", b"[1e999]"):
        assert raw_call_key("read", msgspec.Raw(raw)) == call_key("read", None)


def test_budgets_are_the_settings_lowered_per_operator() -> None:
    governor = make_governor(max_bytes=8192)
    governor.budgets.update("alice", {"default": {"max_bytes": 4096}})
    assert governor.budget("alice", "read").max_bytes == 4096
    assert governor.budget("bob", "read") == GovernorSettings(max_bytes=8192).budget("read")


async def test_shaping_spills_and_signs_and_a_fitting_result_is_none() -> None:
    governor = make_governor()
    with deadline(10):
        assert await governor.shape("read", "local", jsonrpc.encode(sdk_string("hi")), Budget()) is None
        shaped = await governor.shape("read", "local", LARGE, Budget())
    assert shaped is not None
    result, (artifact_id,) = shaped
    (receipt,) = msgspec.json.decode(result)["_meta"][shaping.META_KEY]["receipts"]
    assert receipt["artifact_id"] == artifact_id and receipt["route"] == "read"
    assert receipts.verify(receipt, keys.public_keys())[0]
    artifact = await governor.store.get("local", artifact_id)
    assert artifact.payload == ("word " * 20_000).encode()


async def test_a_payload_over_the_spill_quota_is_shaped_but_not_kept() -> None:
    governor = make_governor(spill_quota_bytes=1024)
    with deadline(10):
        shaped = await governor.shape("read", "local", LARGE, Budget())
    assert shaped is not None
    result, ids = shaped
    (receipt,) = msgspec.json.decode(result)["_meta"][shaping.META_KEY]["receipts"]
    assert ids == [] and receipt["artifact_id"] is None and receipt["expires_at"] is None


async def test_a_remembered_call_is_denied_to_its_operator_only() -> None:
    governor = make_governor()
    with deadline(10):
        shaped = await governor.shape("read", "alice", LARGE, Budget())
        assert shaped is not None
        await governor.remember("alice", "read", call_key("read", {"path": "/a"}), shaped[1])
        denied = await governor.denial("alice", "read", call_key("read", {"path": "/a"}))
        assert await governor.denial("bob", "read", call_key("read", {"path": "/a"})) is None
        assert await governor.denial("alice", "read", call_key("read", {"path": "/b"})) is None
        assert await governor.denial("alice", "write", call_key("write", {"path": "/a"})) is None  # another route
    # Only a route with a shaped call is looked up: the governor policy decodes nobody else's
    # arguments at admit.
    assert governor.may_deny("read") and not governor.may_deny("write")
    assert denied is not None and denied["isError"] is True and "frugal__fetch_slice" in denied["content"][0]["text"]
    (receipt,) = denied["_meta"][shaping.META_KEY]["receipts"]
    assert receipt["kind"] == "denial" and receipt["artifact_id"] == shaped[1][0]
    assert receipts.verify(receipt, keys.public_keys())[0]
