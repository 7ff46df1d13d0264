"""The governor's HTTP routes in-process, through httpx2's ASGITransport: the tools' reports as
JSON for the request's operator, error codes with their HTTP statuses, budgets, the key list,
open registration, and a proxy whose governor is off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from frugal_proxy.governor.engine import Governor
from frugal_proxy.server.governor_routes import governor_routes, http_error
from frugal_proxy.server.guard import GuardSettings
from frugal_proxy.server.operators import Operators
from tests.governed import make_governor
from tests.pace import deadline

pytestmark = pytest.mark.anyio

TEXT = "word " * 20_000


@asynccontextmanager
async def routes(governor: Governor | None, operators: Operators | None = None) -> AsyncIterator[httpx2.AsyncClient]:
    guard = GuardSettings(operators=operators, body_cap=1 << 20)
    app = Starlette(routes=governor_routes(governor, guard), exception_handlers={HTTPException: http_error})
    with deadline(10):
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            yield client


def problem(response: httpx2.Response) -> tuple[int, Any]:
    return response.status_code, response.json()["error"]


async def test_shape_then_fetch_the_slices_back() -> None:
    async with routes(make_governor()) as client:
        shaped = (await client.post("/shape", json={"route": "read", "text": TEXT})).json()
        (receipt,) = shaped["receipts"]
        data = b""
        offset: int | None = 0
        while offset is not None:
            piece = (
                await client.post("/fetch-slice", json={"artifact_id": receipt["artifact_id"], "offset": offset})
            ).json()
            data += piece["text"].encode()
            offset = piece["next_offset"]
        verdict = (await client.post("/receipts/verify", json={"receipt": receipt})).json()
        key_list = (await client.get("/verify-key")).json()
    assert shaped["truncated"] is True and data == TEXT.encode()
    assert verdict["valid"] is True and verdict["key_id"] == key_list["signing_key_id"]
    assert key_list["keys"] == [{"key_id": verdict["key_id"], "signing": True}]


async def test_errors_carry_their_code_and_status() -> None:
    async with routes(make_governor()) as client:
        unknown = await client.post("/fetch-slice", json={"artifact_id": "art_nope"})
        not_json = await client.post("/shape", content=b"{nope")
        not_object = await client.post("/shape", json=[1])
        bad_arguments = await client.post("/shape", json={"route": "x"})
        bad_range = await client.post("/fetch-slice", json={"artifact_id": "a", "offset": "x"})
        wrong_method = await client.get("/shape")
    assert problem(unknown) == (404, "unknown_artifact")
    assert problem(not_json) == (400, "invalid_request") and problem(not_object) == (400, "invalid_request")
    assert problem(bad_arguments) == (400, "invalid_arguments")
    assert problem(bad_range) == (400, "invalid_slice_range")
    assert wrong_method.status_code == 405


async def test_an_operator_lowers_its_own_budgets_and_cannot_raise_them() -> None:
    async with routes(make_governor()) as client:
        lowered = await client.post("/budgets", json={"default": {"max_bytes": 4096}})
        raised = await client.post("/budgets", json={"default": {"max_bytes": 10**6}})
        seen = (await client.get("/budgets")).json()
    assert lowered.status_code == 200 and lowered.json()["default"]["max_bytes"] == 4096
    assert problem(raised) == (400, "budget_above_limit")
    assert seen["operator"] == "local" and seen["default"]["max_bytes"] == 4096


async def test_registration_is_closed_unless_opened(tmp_path: Path) -> None:
    async with routes(make_governor()) as client:
        closed = await client.post("/register", json={"operator": "ada"})
    opened = Operators(open_registration=True, path=tmp_path / "operators.json")
    async with routes(make_governor(), opened) as client:
        made = await client.post("/register", json={"operator": "Ada"})
        again = await client.post("/register", json={"operator": "ada"})
        extra = await client.post("/register", json={"operator": "bob", "admin": True})
    assert problem(closed) == (403, "registration_closed")
    assert made.status_code == 201 and made.json()["operator"] == "ada" and made.headers["cache-control"] == "no-store"
    assert await opened.identify(f"Bearer {made.json()['token']}") == "ada"
    assert problem(again) == (409, "operator_exists")
    assert problem(extra) == (400, "invalid_request")


async def test_a_proxy_without_a_governor_says_so() -> None:
    async with routes(None) as client:
        answers = [await client.post("/shape", json={"route": "x", "text": "y"}), await client.get("/budgets")]
    assert [problem(answer) for answer in answers] == [(404, "governor_disabled")] * 2
