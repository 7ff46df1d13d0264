"""Regenerate docs/ui.png, the status page docs/ui.md shows.

    .venv/bin/python scripts/ui_screenshot.py [--out docs/ui.png] [--width 1100]

A demo run, all on 127.0.0.1 in a temporary FRUGAL_HOME: `serve --config --http` over the notes
server, with the tests' loopback fakes of Wikipedia's search (its `/busy` prefix answers 429) and
Tavily's ($0.008 a call, a $0.03 daily cap). The script makes a plain call, a routed search that
rate-limits Wikipedia and fails over to Tavily, and a second search that Tavily serves while
Wikipedia cools down; then Debian's chromium (Playwright, never a downloaded browser) loads
/ui and the PNG is taken once the page shows the second call. The month's earlier days in the
chart are demo lines the script writes into the temporary ledger before the serve starts
(`YYYY-MM.demo-history.jsonl`, say a day's worth of searches each); nothing here touches the real
home.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

import anyio
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from frugal_proxy.ledger.line import encode  # noqa: E402
from tests.e2e.test_http_downstream import Proxy, modern_body, modern_headers  # noqa: E402
from tests.e2e.test_ui_browser import CHROMIUM, KEY, config  # noqa: E402
from tests.ledger_lines import usage_line  # noqa: E402
from tests.servers.fake_apis import fake_apis  # noqa: E402
from tests.servers.search_apis import search_apis  # noqa: E402


def write_history(usage: Path, today: datetime.date) -> None:
    """Demo lines for the month's days before today: a few searches a day, some on Tavily."""
    usage.mkdir(parents=True, exist_ok=True)
    lines = []
    for day in range(1, today.day):
        stamp = f"{today:%Y-%m}-{day:02d}T10:00:00.000Z"
        for n in range(1 + day % 3):
            paid = n % 3 == 0
            provider = "tavily" if paid else "wikipedia"
            price = 0.008 if paid else 0.0
            lines.append(usage_line(ts=stamp, provider=provider, cost_usd=price, total_cost_usd=price, rack_usd=0.015))
    (usage / f"{today:%Y-%m}.demo-history.jsonl").write_bytes(b"".join(encode(line) for line in lines))


async def call(proxy: Proxy, name: str, arguments: dict[str, object], ident: int) -> None:
    params = {"name": name, "arguments": arguments}
    async with httpx2.AsyncClient(timeout=60) as http:
        reply = await http.post(
            proxy.url, json=modern_body("tools/call", params, ident=ident), headers=modern_headers("tools/call", name)
        )
    if reply.status_code != 200 or reply.json()["result"].get("isError"):
        raise RuntimeError(f"{name} failed: {reply.text[:300]}")


async def shoot(proxy: Proxy, out: Path, width: int) -> None:
    from playwright.async_api import async_playwright, expect

    await call(proxy, "add", {"a": 2, "b": 3}, 1)
    await call(proxy, "frugal__search", {"query": "protocol"}, 2)
    await call(proxy, "frugal__search", {"query": "proxy"}, 3)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = await browser.new_page(viewport={"width": width, "height": 900}, color_scheme="light")
        await page.goto(f"{proxy.base}/ui")
        await expect(page.locator("tr[data-call]")).to_have_count(3, timeout=30_000)
        today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
        await expect(page.locator(f'#month-chart rect[data-day="{today}"]')).to_have_count(1, timeout=30_000)
        await page.locator('tr[data-call="frugal__search"] summary').first.click()
        await page.screenshot(path=str(out), full_page=True)
        await browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui.png")
    parser.add_argument("--width", type=int, default=1100)
    options = parser.parse_args()
    if not CHROMIUM.exists():
        print(f"no {CHROMIUM}: scripts/setup.sh installs Debian's chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ui-shot-") as folder, fake_apis() as wiki, search_apis(KEY) as paid:
        home = Path(folder) / "home"
        write_history(home / "usage", datetime.datetime.now(datetime.UTC).date())
        path = Path(folder) / "frugal.toml"
        path.write_text(config(f"{wiki.base}/busy", f"{paid.base}/tavily"))
        env = {"FRUGAL_HOME": str(home), "TAVILY_API_KEY": KEY, "FRUGAL_REPLICA_ID": "demo"}
        os.environ.pop("FRUGAL_CONFIG", None)
        argv = [sys.executable, "-m", "frugal_proxy", "serve", "--config", str(path), "--http", "127.0.0.1:0"]
        proxy = Proxy(argv, env)
        try:
            proxy.wait_listening()
            anyio.run(shoot, proxy, options.out, options.width)
        finally:
            proxy.stop()
    print(f"wrote {options.out} ({options.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
