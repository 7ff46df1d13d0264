"""The status page's files as the package ships them: each one served with its type and a
Content-Security-Policy allowing only the page's own origin, and none of them naming another
origin (no CDN, no web font, no analytics)."""

from __future__ import annotations

import re

import httpx2
import pytest
from starlette.applications import Starlette

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
