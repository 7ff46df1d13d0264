"""The status page's files as the package ships them: each one served with its type and a
Content-Security-Policy allowing only the page's own origin, and none of them naming another
origin (no CDN, no web font, no analytics)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from frugal_proxy.identities import DEFAULT, token_hash
from frugal_proxy.server.guard import Guard, GuardSettings
from frugal_proxy.server.operators import Operators
from frugal_proxy.server.ui_data import page_data
from frugal_proxy.server.ui_routes import ASSETS, CSP, asset, ui_routes

pytestmark = pytest.mark.anyio

SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def test_no_file_of_the_page_names_another_origin() -> None:
    for name, _ in ASSETS.values():
        text = asset(name).decode()
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text)) - {
            SVG_NAMESPACE,
            "//www.w3.org/2000/svg",
        }
        assert not urls, f"{name} names another origin: {sorted(urls)}"
    assert "innerHTML" not in asset("status.js").decode()  # tool names come from clients: text only


async def test_each_file_and_the_data_carry_the_policy() -> None:
    async def data() -> dict[str, object]:
        return {"schema": 1, "serves": []}

    app = Starlette(routes=ui_routes(data))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        for path, (name, media_type) in ASSETS.items():
            reply = await http.get(path)
            assert reply.status_code == 200 and reply.content == asset(name)
            assert reply.headers["content-type"] == media_type
            assert reply.headers["content-security-policy"] == CSP
            assert reply.headers["x-content-type-options"] == "nosniff"
        answered = await http.get("/ui/data")
    assert answered.json() == {"schema": 1, "serves": []}
    assert answered.headers["cache-control"] == "no-store" and answered.headers["content-security-policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "default-src 'none'" in CSP


def call(operator: str) -> dict[str, Any]:
    return {"tool": f"tool_of_{operator}", "operator": operator}


async def seen_by(operators: Operators, token: str) -> dict[str, Any]:
    async def data() -> dict[str, Any]:
        serve = {"pid": 1, "upstreams": [], "providers": [], "calls_total": 3}
        serve["calls"] = [call("alice"), call("bob"), {"tool": "from_an_old_status_file"}]
        month = {"month": "2026-12", "calls": 3}
        return page_data([serve], month, None, source="serve")

    app = Guard(Starlette(routes=ui_routes(data, operators)), GuardSettings(operators=operators))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
        reply = await http.get("/ui/data", headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200
    answer: dict[str, Any] = reply.json()
    return answer


async def test_an_operator_among_several_sees_its_own_calls_and_no_month(tmp_path: Path) -> None:
    tokens = {"alice": "t-alice", "bob": "t-bob", DEFAULT: "t-default"}
    operators = Operators({name: token_hash(token) for name, token in tokens.items()}, path=tmp_path / "ops.json")
    alice = await seen_by(operators, "t-alice")
    assert alice["scope"] == "operator" and alice["month"] is None
    assert alice["serves"][0]["calls"] == [call("alice")] and alice["serves"][0]["calls_total"] is None
    admin = await seen_by(operators, "t-default")  # FRUGAL_AUTH_TOKEN's holder sees everything
    assert admin["scope"] == "all" and len(admin["serves"][0]["calls"]) == 3 and admin["month"]["calls"] == 3


async def test_a_registered_operator_sees_its_own_and_the_one_configured_sees_everything(tmp_path: Path) -> None:
    operators = Operators({"ops": token_hash("t-ops")}, open_registration=True, path=tmp_path / "ops.json")
    _, token = await operators.register("alice")
    alice = await seen_by(operators, token)
    assert alice["scope"] == "operator" and alice["serves"][0]["calls"] == [call("alice")]
    ops = await seen_by(operators, "t-ops")
    assert ops["scope"] == "all" and len(ops["serves"][0]["calls"]) == 3
