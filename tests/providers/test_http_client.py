"""The shared HTTP client: one User-Agent, bounded bodies, and every failure as an Outcome."""

from __future__ import annotations

import email.utils
import functools
import time
from collections.abc import Iterator, Mapping

import httpx2
import msgspec
import pytest

from frugal_proxy.providers import http_client
from frugal_proxy.providers.http_client import MAX_BODY_BYTES, BodyTooLarge, fault, network_fault
from frugal_proxy.records import Outcome
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


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone nine hours east of UTC, for this test only."""
    monkeypatch.setenv("TZ", "JST-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_a_retry_after_date_in_minus_0000_is_gmt_not_local_time() -> None:
    later = email.utils.formatdate(time.time() + 30)  # "... -0000": UTC, as RFC 5322 writes it without a zone
    assert later.endswith("-0000")
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
        (503, "transient", "failed (503)"),
    ],
)
def test_statuses_are_classified_by_what_the_caller_can_do(status: int, kind: str, words: str) -> None:
    outcome = fault("jina", httpx2.Response(status))
    assert outcome is not None and outcome.kind == kind and words in outcome.message
    assert fault("jina", httpx2.Response(204)) is None


def test_a_503_that_says_when_to_come_back_is_a_rate_limit_of_the_api() -> None:
    """RFC 9110 §10.2.3: a 503's Retry-After is how long the service expects to be unavailable;
    the cooldown fences the provider for it. Another 5xx keeps its wait for a retry only."""
    outcome = fault("serper", httpx2.Response(503, headers={"Retry-After": "120"}))
    assert outcome == Outcome(
        "rate_limited", message="serper is unavailable (503); it asks to wait 120 s", retry_after=120.0
    )
    other = fault("serper", httpx2.Response(502, headers={"Retry-After": "2"}))
    assert other is not None and (other.kind, other.retry_after) == ("transient", 2.0)


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


class _Answer(msgspec.Struct):
    items: list[str]


async def test_fetch_json_answers_the_body_or_the_outcome_of_what_went_wrong() -> None:
    answers = iter(
        [
            httpx2.Response(200, json={"items": ["a"]}),
            httpx2.Response(200, json={"other": 1}),
            httpx2.Response(429, headers={"X-Wait": "4"}),
        ]
    )
    shared = client(lambda request: next(answers))
    seen: list[tuple[int, str | None]] = []

    def refine(status: int, headers: Mapping[str, str], outcome: Outcome) -> Outcome:
        seen.append((status, headers.get("x-wait")))
        return Outcome(outcome.kind, message="refined", retry_after=4.0)

    fetch = functools.partial(shared.fetch_json, "api", "GET", "https://api.example/s", _Answer, request_timeout=5)
    assert await fetch(refine=refine) == _Answer(["a"])
    bad = await fetch(refine=refine)
    assert isinstance(bad, Outcome) and bad.kind == "transient" and "documented JSON" in bad.message
    assert await fetch(refine=refine) == Outcome("rate_limited", message="refined", retry_after=4.0)
    assert seen == [(429, "4")]
    await shared.close()
