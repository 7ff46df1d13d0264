"""The governor's engine without its policy: call fingerprints, per-operator budgets, shaping
that spills and signs, a payload over the spill quota, and the repeat denial it answers."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from frugal_proxy.config import Budget, GovernorSettings
from frugal_proxy.governor import keys, receipts, shaping
from frugal_proxy.governor.engine import call_key, iso_time
from frugal_proxy.protocol import jsonrpc
from tests.governed import make_governor, sdk_string

pytestmark = pytest.mark.anyio

LARGE = jsonrpc.encode(sdk_string("word " * 20_000))


def test_a_call_is_known_by_its_route_and_arguments_in_any_key_order() -> None:
    assert call_key("read", {"a": 1, "b": [1, 2]}) == call_key("read", {"b": [1, 2], "a": 1})
    assert call_key("read", {"a": 1}) != call_key("write", {"a": 1})
    assert call_key("read", {"a": 1}) != call_key("read", {"a": "1"})
    assert iso_time(0) == "1970-01-01T00:00:00Z"


def test_budgets_are_the_settings_lowered_per_operator() -> None:
    governor = make_governor(max_bytes=8192)
    governor.budgets.update("alice", {"default": {"max_bytes": 4096}})
    assert governor.budget("alice", "read").max_bytes == 4096
    assert governor.budget("bob", "read") == GovernorSettings(max_bytes=8192).budget("read")


async def test_shaping_spills_and_signs_and_a_fitting_result_is_none() -> None:
    governor = make_governor()
    with anyio.fail_after(10):
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
    with anyio.fail_after(10):
        shaped = await governor.shape("read", "local", LARGE, Budget())
    assert shaped is not None
    result, ids = shaped
    (receipt,) = msgspec.json.decode(result)["_meta"][shaping.META_KEY]["receipts"]
    assert ids == [] and receipt["artifact_id"] is None and receipt["expires_at"] is None


async def test_a_remembered_call_is_denied_to_its_operator_only() -> None:
    governor = make_governor()
    with anyio.fail_after(10):
        shaped = await governor.shape("read", "alice", LARGE, Budget())
        assert shaped is not None
        await governor.remember("alice", "read", {"path": "/a"}, shaped[1])
        denied = await governor.denial("alice", "read", {"path": "/a"})
        assert await governor.denial("bob", "read", {"path": "/a"}) is None
        assert await governor.denial("alice", "read", {"path": "/b"}) is None
        assert await governor.denial("alice", "write", {"path": "/a"}) is None  # another route
    # Only a route with a shaped call is looked up: the governor policy decodes nobody else's
    # arguments at admit.
    assert governor.may_deny("read") and not governor.may_deny("write")
    assert denied is not None and denied["isError"] is True and "frugal__fetch_slice" in denied["content"][0]["text"]
    (receipt,) = denied["_meta"][shaping.META_KEY]["receipts"]
    assert receipt["kind"] == "denial" and receipt["artifact_id"] == shaped[1][0]
    assert receipts.verify(receipt, keys.public_keys())[0]
