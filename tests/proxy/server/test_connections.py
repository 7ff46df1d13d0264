"""The connection caps' bookkeeping (the deadlines and the 503s on the wire: tests/e2e/test_http_limits.py)."""

from __future__ import annotations

import json
import logging

import pytest

from frugal_proxy.server.connections import ConnectionLimits, plain_response


def test_each_ip_has_its_share_and_all_share_the_overall_cap() -> None:
    limits = ConnectionLimits(overall=3, per_ip=2)
    assert limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.1") is None
    per_ip = limits.admit("10.0.0.1")
    assert per_ip is not None and "--max-connections-per-ip" in per_ip and "10.0.0.1 (2" in per_ip
    assert limits.admit("10.0.0.2") is None
    overall = limits.admit("10.0.0.3")
    assert overall is not None and "--max-connections" in overall and "(3," in overall
    assert (limits.total, dict(limits.open)) == (3, {"10.0.0.1": 2, "10.0.0.2": 1})


def test_a_closed_connection_gives_its_place_back() -> None:
    limits = ConnectionLimits(overall=1, per_ip=1)
    assert limits.admit("10.0.0.1") is None
    assert limits.admit("10.0.0.2") is not None  # refused ones are not counted
    limits.release("10.0.0.1")
    assert (limits.total, dict(limits.open)) == (0, {})
    assert limits.admit("10.0.0.2") is None


def test_a_refusal_is_a_whole_response_that_closes_the_connection() -> None:
    response = plain_response(503, "Service Unavailable", "too_many_connections", "full", "retry-after: 1\r\n")
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"connection: close" in head and b"retry-after: 1" in head
    assert f"content-length: {len(body)}".encode() in head
    assert json.loads(body) == {"error": "too_many_connections", "message": "full"}


def test_a_flood_of_refusals_is_logged_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    limits = ConnectionLimits()
    with caplog.at_level(logging.WARNING, logger="frugal_proxy.http_connections"):
        for second in range(25):
            limits.warn("connection refused", float(second), status=503)
    records = [record for record in caplog.records if record.getMessage() == "connection refused"]
    assert [record.__dict__["also_since_last"] for record in records] == [0, 9, 9]
