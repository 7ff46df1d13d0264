"""Era helpers: modern _meta validation and what crosses between the eras."""

from __future__ import annotations

import msgspec
import pytest

from frugal_proxy.protocol import eras, jsonrpc


def raw_params(value: dict[str, object]) -> dict[str, msgspec.Raw]:
    return {key: jsonrpc.raw(item) for key, item in value.items()}


def test_validate_modern_accepts_the_required_keys() -> None:
    meta = eras.modern_meta(
        raw_params({"_meta": {eras.META_VERSION: "2026-07-28", eras.META_CAPABILITIES: {"sampling": {}}}})
    )
    assert meta is not None
    context = eras.validate_modern(1, meta)
    assert context.capabilities == {"sampling": {}}


def test_unsupported_version_names_the_supported_ones() -> None:
    meta = raw_params({eras.META_VERSION: "2030-01-01", eras.META_CAPABILITIES: {}})
    with pytest.raises(eras.UnsupportedVersion) as caught:
        eras.validate_modern(1, meta)
    assert caught.value.code == -32022
    assert "2026-07-28" in caught.value.data()["supported"]


def test_strip_and_add_modern_meta_keep_other_keys() -> None:
    params = raw_params({"name": "x", "_meta": {eras.META_VERSION: "2026-07-28", "progressToken": 5}})
    stripped = eras.strip_modern_meta(params)
    assert jsonrpc.decode_any(stripped["_meta"]) == {"progressToken": 5}
    stamped = eras.add_modern_meta(stripped, {eras.META_VERSION: "2026-07-28", eras.META_CAPABILITIES: {}})
    assert jsonrpc.decode_any(stamped["_meta"]) == {
        "progressToken": 5,
        eras.META_VERSION: "2026-07-28",
        eras.META_CAPABILITIES: {},
    }


def test_complete_for_modern_never_widens_a_cache_scope() -> None:
    body = raw_params({"tools": [], "cacheScope": "private"})
    completed = eras.complete_for_modern("tools/list", body)
    assert completed is not None
    assert jsonrpc.decode_any(completed["ttlMs"]) == 0
    assert jsonrpc.decode_any(completed["cacheScope"]) == "private"
    assert eras.complete_for_modern("tools/call", raw_params({"resultType": "complete"})) is None


def test_for_session_era_removes_what_only_2026_07_28_defines() -> None:
    body = raw_params(
        {
            "tools": [],
            "resultType": "complete",
            "ttlMs": 5,
            "cacheScope": "public",
            "_meta": {eras.META_SERVER_INFO: {"name": "s", "version": "1"}, "x/kept": 1},
        }
    )
    translated = eras.for_session_era(body)
    assert translated is not None
    assert {key: jsonrpc.decode_any(value) for key, value in translated.items()} == {
        "tools": [],
        "_meta": {"x/kept": 1},
    }
    only_info = raw_params({"content": [], "_meta": {eras.META_SERVER_INFO: {}}})
    assert eras.for_session_era(only_info) == raw_params({"content": []})
    assert eras.for_session_era(raw_params({"content": [], "_meta": {"x": 1}})) is None
    # input_required is the bridge's to turn into server requests first, never stripped.
    pending = raw_params({"resultType": "input_required", "inputRequests": {}})
    assert eras.for_session_era(pending) is None


def test_negotiate_handshake() -> None:
    assert eras.negotiate_handshake("2025-03-26") == "2025-03-26"
    assert eras.negotiate_handshake("2099-01-01") == eras.LATEST_HANDSHAKE


def test_log_level_takes_the_spec_levels_and_names_them_otherwise() -> None:
    assert eras.log_level("emergency", "level") == "emergency"
    for bad in ("nonsense", "WARNING", None, 3, ["debug"]):
        with pytest.raises(jsonrpc.MessageError) as caught:
            eras.log_level(bad, "params.level", 7)
        assert caught.value.code == jsonrpc.INVALID_PARAMS and caught.value.request_id == 7
        assert "params.level" in str(caught.value) and all(level in str(caught.value) for level in eras.LOG_LEVELS)


def test_a_modern_request_with_a_bad_log_level_is_refused() -> None:
    meta = raw_params({eras.META_VERSION: "2026-07-28", eras.META_CAPABILITIES: {}, eras.META_LOG_LEVEL: "loud"})
    with pytest.raises(jsonrpc.MessageError) as caught:
        eras.validate_modern(1, meta)
    assert caught.value.code == jsonrpc.INVALID_PARAMS
    meta[eras.META_LOG_LEVEL] = jsonrpc.raw("notice")
    assert eras.validate_modern(1, meta).log_level == "notice"
