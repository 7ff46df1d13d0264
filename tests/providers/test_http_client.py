"""The shared HTTP client: one User-Agent, bounded bodies, and every failure as an Outcome."""

from __future__ import annotations

import email.utils
import time

import httpx2
import pytest

from frugal_proxy.providers import http_client
from frugal_proxy.providers.http_client import MAX_BODY_BYTES, BodyTooLarge, fault, network_fault
from tests.providers.api_fakes import client

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"Retry-After": "12"}, 12.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({}, None),
    ],
)
def test_a_429_carries_the_wait_the_server_asked_for(headers: dict[str, str], wait: float | None) -> None:
    outcome = fault("serper", httpx2.Response(429, headers=headers))
    assert outcome is not None and outcome.kind == "rate_limited" and outcome.retry_after == wait


def test_a_retry_after_date_is_read_as_seconds_from_now() -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    outcome = fault("brave", httpx2.Response(429, headers={"Retry-After": later}))
    assert outcome is not None and outcome.retry_after is not None and 25 < outcome.retry_after <= 30


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        (401, "permanent", "refused the key (401)"),
        (402, "permanent", "out of credits (402)"),
        (404, "permanent", "check base_url"),
        (418, "permanent", "refused the request (418)"),
        (408, "transient", "timed out (408)"),
        (502, "transient", "failed (502)"),
    ],
)
def test_statuses_are_classified_by_what_the_caller_can_do(status: int, kind: str, words: str) -> None:
    outcome = fault("jina", httpx2.Response(status))
    assert outcome is not None and outcome.kind == kind and words in outcome.message
    assert fault("jina", httpx2.Response(204)) is None


async def test_every_request_names_the_project_and_a_huge_body_is_refused() -> None:
    seen: list[httpx2.Request] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, content=b"x" * (MAX_BODY_BYTES + 1))

    shared = client(answer)
    with pytest.raises(BodyTooLarge):
        await shared.send("GET", "https://api.example/search", request_timeout=5)
    assert seen[0].headers["user-agent"].startswith("frugal-proxy/")
    assert network_fault("api", BodyTooLarge("too big")).kind == "transient"
    await shared.close()
    await shared.close()  # closing twice is harmless


async def test_the_client_is_made_on_first_use_only() -> None:
    shared = http_client.HttpClient()
    assert shared._client is None
    await shared.close()
