"""The routed tools through `frugal-proxy serve`, as a client sees them: listed with their
schemas, a routed search answered with its receipt, failover and its error, and `serve` with no
config file at all. Providers reach Web APIs on 127.0.0.1 (tests/servers/fake_apis.py) through
their `base_url`; every other built-in is denied so that nothing leaves the machine."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from frugal_proxy.providers import registry
from tests.conftest import notes_command
from tests.pace import deadline, paced
from tests.servers.fake_apis import FakeApis, fake_apis

pytestmark = pytest.mark.anyio

# Every built-in but wikipedia is off, so that a test never reaches the network.
OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name != "wikipedia"
)


@pytest.fixture
def apis() -> Iterator[FakeApis]:
    with fake_apis() as running:
        yield running


def serve(home: Path, config: Path | None = None, **env: str) -> StdioServerParameters:
    args = ["-m", "frugal_proxy", "serve"] + (["--config", str(config)] if config else [])
    environ = {**os.environ, "FRUGAL_HOME": str(home), **env}
    environ.pop("FRUGAL_CONFIG", None)
    return StdioServerParameters(command=sys.executable, args=args, env=environ)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "frugal.toml"
    path.write_text(text)
    return path


def search_config(apis: FakeApis, wikipedia: str = "/wikipedia", upstream: bool = True) -> str:
    lines = [f'[search_providers.wikipedia]\nbase_url = "{apis.base}{wikipedia}"', OFF]
    if upstream:
        lines.insert(0, f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}")
    return "\n".join(lines) + "\n"


def structured(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result
    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    assert json.loads(texts[0]) == result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_routed_search_answers_with_its_receipt(tmp_path: Path, apis: FakeApis, mode: str) -> None:
    config = write(tmp_path, search_config(apis))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode=mode, cache=None) as client:  # type: ignore[arg-type]
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert "frugal__search" in tools and "add" in tools  # one upstream: its names as they are
            assert tools["frugal__search"].input_schema["required"] == ["query"]
            assert "frugal__extract" not in tools  # no extract provider is on here
            result = await client.call_tool("frugal__search", {"query": "proxy", "max_results": 2})
    body = structured(result)
    assert body["results"] == [
        {
            "title": "Proxy server",
            "url": f"{apis.base}/wikipedia/wiki/Proxy_server",
            "snippet": "A proxy sits between a client and a server",
            "source": "wikipedia",
        }
    ]
    assert body["provider_used"] == "wikipedia" and body["cost_usd"] == 0 and body["total_cost_usd"] == 0
    assert [(a["provider"], a["outcome"]) for a in body["attempts"]] == [("wikipedia", "won")]
    assert body["reason"] == "policy=cheap: effective cost ascending; provider=wikipedia won on attempt 1"
    assert body["est_tokens"] > 0 and body["latency_ms"] >= 0
    assert apis.requests["wikipedia"] == 1


async def test_a_deny_of_the_config_is_in_skipped_and_not_in_each_reason(tmp_path: Path, apis: FakeApis) -> None:
    """A deliberate deny is the same on every call: the receipt's skipped[] keeps it, the reason
    names only what decided this call."""
    off = "".join(
        f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
        for builtin in registry.built_ins()
        if builtin.name not in ("wikipedia", "marginalia")
    )
    config = write(
        tmp_path,
        f'[search_providers.wikipedia]\nbase_url = "{apis.base}/wikipedia"\n'
        f'[search_providers.marginalia]\nbase_url = "{apis.base}/marginalia"\n'
        f'{off}[routing.search]\ndeny = ["marginalia"]\n',
    )
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="legacy", cache=None) as client:
            result = await client.call_tool("frugal__search", {"query": "proxy"})
    body = structured(result)
    assert body["provider_used"] == "wikipedia"
    assert body["skipped"] == [
        {"provider": "marginalia", "guard": "deny", "why": "skipped marginalia (denied by routing.search.deny)"}
    ]
    assert body["reason"] == "policy=cheap: effective cost ascending; provider=wikipedia won on attempt 1"
    assert apis.requests.get("marginalia", 0) == 0


async def test_bad_arguments_and_a_failing_provider_get_clear_errors(tmp_path: Path, apis: FakeApis) -> None:
    config = write(tmp_path, search_config(apis, wikipedia="/down"))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="auto", cache=None) as client:
            refused = await client.call_tool("frugal__search", {"query": "x", "max_results": 500})
            failed = await client.call_tool("frugal__search", {"query": "proxy"})
            pinned = await client.call_tool("frugal__search", {"query": "proxy", "provider": "brave"})
            still = await client.call_tool("add", {"a": 2, "b": 3})
    assert refused.is_error and "frugal__search: max_results is 1 to 50" in refused.content[0].text  # type: ignore[union-attr]
    assert failed.is_error
    assert failed.content[0].text == (  # type: ignore[union-attr]
        "frugal__search failed on every provider (1 attempt(s)): wikipedia failed (503)"
    )
    assert pinned.is_error  # brave is off here
    assert "no search provider named 'brave' is on (available: wikipedia)" in pinned.content[0].text  # type: ignore[union-attr]
    assert still.is_error is False  # plain upstream tools keep working beside them


async def test_serve_with_no_config_file_lists_the_built_in_providers(tmp_path: Path) -> None:
    """Nothing configured: no upstreams, the zero-key providers' routed tools (not called here:
    they would reach the network)."""
    with deadline(60):
        async with Client(serve(tmp_path / "home"), mode="auto", cache=None) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
    assert "frugal__search" in names
    assert "frugal__fetch_slice" in names  # the governor's own tools as ever


async def test_a_config_without_upstreams_is_valid(tmp_path: Path, apis: FakeApis) -> None:
    config = write(tmp_path, search_config(apis, upstream=False))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="legacy", cache=None) as client:
            result = await client.call_tool("frugal__search", {"query": "frugal"})
    assert [hit["title"] for hit in structured(result)["results"]] == ["Frugality"]


async def test_execute_routes_an_intent_and_says_where(tmp_path: Path, apis: FakeApis) -> None:
    config = write(tmp_path, search_config(apis))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="auto", cache=None) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            result = await client.call_tool("frugal__execute", {"intent": "look up model context protocol"})
            nothing = await client.call_tool("frugal__execute", {"intent": "read https://example.com/page"})
    assert "frugal__execute" in names
    body = structured(result)
    assert body["capability"] == "search" and body["provider_used"] == "wikipedia"
    assert body["reason"].startswith("no URL: routed to a web search; policy=cheap")
    assert [hit["title"] for hit in body["results"]] == ["Model Context Protocol"]
    assert nothing.is_error  # a URL, but no extract provider is on here
    assert "a URL: the page is read, but no extract provider is on" in nothing.content[0].text  # type: ignore[union-attr]


async def test_a_priced_upstream_tool_carries_its_receipt_in_meta(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        f"[upstreams.notes]\ncommand = {json.dumps(notes_command())}\ncost_per_call = 0.0025\n"
        + OFF
        + "[search_providers.wikipedia]\nenabled = false\n",
    )
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="legacy", cache=None) as client:
            result = await client.call_tool("add", {"a": 2, "b": 3})
    assert result.structured_content == {"result": 5}  # the upstream's own answer, untouched
    route = (result.meta or {})["frugal/route"]
    assert route["provider_used"] == "notes" and route["cost_usd"] == 0.0025
    assert [(a["provider"], a["outcome"]) for a in route["attempts"]] == [("notes", "won")]


async def test_guards_through_serve_cooldown_then_loop_guard(tmp_path: Path, apis: FakeApis) -> None:
    """A provider answering 429 with Retry-After: 7 is not retried (over 5 s) and is fenced off
    for the cooldown; the same search again is refused by the cooldown without reaching it, and
    a third time by the loop guard (limit 2), before anything else."""
    text = search_config(apis, wikipedia="/busy") + "[routing]\nloop_limit = 2\ncooldown = '90s'\n"
    params = serve(tmp_path / "home", write(tmp_path, text))
    params.args = [*params.args, "--call-timeout", "20s"]
    with deadline(60):
        async with Client(params, mode="auto", cache=None) as client:
            results = [await client.call_tool("frugal__search", {"query": "proxy"}) for _ in range(3)]
    messages = [result.content[0].text for result in results]  # type: ignore[union-attr]
    assert all(result.is_error for result in results)
    assert messages[0] == (
        "frugal__search failed on every provider (1 attempt(s)): wikipedia is rate-limiting (429); it asks to wait 7 s"
    )
    assert messages[1].startswith(
        "frugal__search failed: no provider is available for this tool "
        "(cooldown: skipped wikipedia (rate-limited; cooling down for another 1m"
    )
    assert messages[2] == (
        "frugal__search: loop guard: this exact frugal__search call has been made 3 times in the last 1m0s "
        f"(limit 2); the result will not change, so change the arguments or wait {messages[2].rpartition('wait ')[2]}"
    )
    assert apis.requests["busy"] == 1  # no retry, and nothing after the fence


async def test_over_http_the_call_deadline_wins_when_it_is_the_shorter(tmp_path: Path) -> None:
    """A wrapped server's plain tool over HTTP, `limits.call_timeout` 1 s (from the file) against
    `--request-timeout` 20 s: the call deadline answers first, naming its knob. With the request
    timeout the shorter, it answers instead (test_http_streams.py, the request-timeout test)."""
    from tests.e2e.test_http_downstream import start
    from tests.e2e.test_http_streams import modern_body, modern_headers

    config = tmp_path / "frugal.toml"
    config.write_text('[limits]\ncall_timeout = "1s"\n')
    proxy = start(notes_command(), "--config", str(config), "--request-timeout", "20")
    try:
        sleep = modern_body("tools/call", {"name": "sleep", "arguments": {"seconds": 15}}, ident=9)
        with deadline(12):
            async with httpx2.AsyncClient(timeout=paced(12)) as http:
                answered = await http.post(proxy.url, json=sleep, headers=modern_headers("tools/call", "sleep"))
        reply = answered.json()
        assert reply["id"] == 9 and reply["result"]["isError"] is True, reply
        text = reply["result"]["content"][0]["text"]
        assert "limits.call_timeout" in text and "--request-timeout" not in text, text
    finally:
        proxy.stop()


def page_config(apis: FakeApis, extra: str = "", browserless: str = "") -> str:
    """The local `readability` and a paid Browserless on the fake APIs; every other built-in off."""
    off = "".join(
        f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
        for builtin in registry.built_ins()
        if builtin.name not in ("readability", "browserless")
    )
    browser = f'[browse_providers.browserless]\nbase_url = "{apis.base}/browserless"\n{browserless}'
    return f"{off}[extract_providers.readability]\nenabled = true\n{browser}\n{extra}"


BROWSERLESS = {"BROWSERLESS_TOKEN": "test-token"}


@pytest.mark.parametrize(
    ("guard", "arguments", "browserless", "extra"),
    [
        ("ceiling", {"max_cost_usd": 0}, "", ""),
        ("deny", {}, "", '[routing.browse]\ndeny = ["browserless"]\n'),
        ("budget", {}, "daily_budget_usd = 0.001\n", ""),
    ],
)
async def test_a_near_empty_read_that_no_browser_may_render_comes_back_with_a_warning(
    tmp_path: Path, apis: FakeApis, guard: str, arguments: dict[str, Any], browserless: str, extra: str
) -> None:
    """A URL intent whose read came back nearly empty, with every browser ruled out (a ceiling
    of 0, deny, a daily budget under its price): the page as read, never a paid render, and a
    warning that says why (README: "A call capped at 0 never falls forward into a paid render;
    the empty extract comes back with a warning that says why")."""
    config = write(tmp_path, page_config(apis, extra, browserless))
    intent = {"intent": f"read {apis.base}/pages/spa", **arguments}
    with deadline(60):
        async with Client(serve(tmp_path / "home", config, **BROWSERLESS), mode="auto", cache=None) as client:
            result = await client.call_tool("frugal__execute", intent)
    body = structured(result)
    assert body["capability"] == "extract" and body["provider_used"] == "readability"
    assert [(a["provider"], a["outcome"]) for a in body["attempts"]] == [("readability", "empty")]
    assert body["cost_usd"] == 0 and body["total_cost_usd"] == 0
    warning = next(w for w in body["warnings"] if "not rendered in a browser" in w)
    assert f"{guard}: skipped browserless" in warning, warning
    assert "no browser may render it: the page as read" in body["reason"]
    assert apis.requests["browserless"] == 0 and apis.requests["spa"] == 1


async def test_execute_takes_browse_cues_only_from_the_words_around_the_url(tmp_path: Path, apis: FakeApis) -> None:
    """`read …/pages/js` is a free read (the "js" is the page's address, not a cue); `render
    …/pages/spa` goes to the paid browser, and a near-empty read falls forward to it."""
    config = write(tmp_path, page_config(apis))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config, **BROWSERLESS), mode="auto", cache=None) as client:
            read = await client.call_tool("frugal__execute", {"intent": f"read {apis.base}/pages/js"})
            assert apis.requests["browserless"] == 0
            rendered = await client.call_tool("frugal__execute", {"intent": f"render {apis.base}/pages/spa"})
            fell = await client.call_tool("frugal__execute", {"intent": f"summarize {apis.base}/pages/spa"})
    body = structured(read)
    assert body["capability"] == "extract" and body["provider_used"] == "readability"
    assert "A proxy between an agent and its tools" in body["page"]["markdown"]
    assert structured(rendered)["capability"] == "browse" and structured(rendered)["provider_used"] == "browserless"
    forward = structured(fell)
    assert [(a["provider"], a["outcome"]) for a in forward["attempts"]] == [
        ("readability", "empty"),
        ("browserless", "won"),
    ]
    assert forward["total_cost_usd"] == 0.002 and apis.requests["browserless"] == 2


async def test_execute_priority_balanced_defers_to_the_configured_strategy(tmp_path: Path, apis: FakeApis) -> None:
    """README: "balanced defers to your configured strategy"; cheap and premium name their own."""
    config = write(tmp_path, search_config(apis) + '[routing.search]\nstrategy = "premium"\n')
    reasons = {}
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="auto", cache=None) as client:
            for priority in ("balanced", "cheap"):
                arguments = {"intent": "look up proxy", "priority": priority}
                reasons[priority] = structured(await client.call_tool("frugal__execute", arguments))["reason"]
    assert "policy=premium: premium first, list price descending" in reasons["balanced"], reasons
    assert "policy=cheap: effective cost ascending" in reasons["cheap"], reasons


async def test_a_daily_budget_of_zero_is_no_cap(tmp_path: Path, apis: FakeApis) -> None:
    """README: "Zero or absent means no cap": a paid provider with `daily_budget_usd = 0` is called."""
    text = search_config(apis).replace(
        "[search_providers.wikipedia]\n", "[search_providers.wikipedia]\ncost_per_call = 0.001\ndaily_budget_usd = 0\n"
    )
    with deadline(60):
        async with Client(serve(tmp_path / "home", write(tmp_path, text)), mode="auto", cache=None) as client:
            result = await client.call_tool("frugal__search", {"query": "proxy"})
    body = structured(result)
    assert body["provider_used"] == "wikipedia" and body["cost_usd"] == 0.001
    assert "skipped" not in body and apis.requests["wikipedia"] == 1


async def test_a_cache_ttl_of_zero_turns_that_caching_off(tmp_path: Path, apis: FakeApis) -> None:
    """README: `search_ttl: 5m  # default 5m; "0" turns search caching off`."""
    text = search_config(apis) + '[cache]\nenabled = true\nsearch_ttl = "0"\n'
    with deadline(60):
        async with Client(serve(tmp_path / "home", write(tmp_path, text)), mode="auto", cache=None) as client:
            bodies = [structured(await client.call_tool("frugal__search", {"query": "proxy"})) for _ in range(2)]
    assert [body.get("cached") for body in bodies] == [None, None]
    assert apis.requests["wikipedia"] == 2


def content_of(body: dict[str, Any]) -> str:
    return str(body["page"]["markdown"])


async def test_max_chars_is_the_page_budget_and_the_call_overrides_the_default(tmp_path: Path, apis: FakeApis) -> None:
    """README: `limits.max_chars` is the default page-content budget; a call's `max_chars`
    overrides it in either direction (0: no cap); the cut field ends with the marker; every
    page answer reports chars_returned, chars_total, est_tokens (chars / 4, rounded up) and,
    when they differ, truncated: true."""
    config = write(tmp_path, page_config(apis, "[limits]\nmax_chars = 300\n"))
    url = f"{apis.base}/pages/long"
    with deadline(60):
        async with Client(serve(tmp_path / "home", config, **BROWSERLESS), mode="auto", cache=None) as client:
            default = structured(await client.call_tool("frugal__extract", {"url": url}))
            larger = structured(await client.call_tool("frugal__extract", {"url": url, "max_chars": 50_000}))
            uncapped = structured(await client.call_tool("frugal__extract", {"url": url, "max_chars": 0}))
            smaller = structured(await client.call_tool("frugal__execute", {"intent": f"read {url}"}))
            artifact = json.loads(content_of(default).rpartition("frugal__fetch_slice ")[2].split(" for the rest")[0])
            rest = await client.call_tool("frugal__fetch_slice", {**artifact, "limit": 100_000})
    total = default["chars_total"]
    assert total > 20_000
    assert default["chars_returned"] <= 300 and default["truncated"] is True
    assert default["est_tokens"] == -(-default["chars_returned"] // 4)
    kept, _, marker = content_of(default).rpartition("\n")
    assert len(kept) == default["chars_returned"]
    assert marker.startswith(
        f"[frugal: output truncated to {default['chars_returned']} of {total} chars; "
        "pass a larger max_chars to see more"
    ), marker
    assert "frugal__fetch_slice" in marker
    assert rest.is_error is False and kept.rstrip() not in str(rest.structured_content)
    # Up past the default and past the size governor's own budget (32 KB over both copies): the whole page.
    for whole in (larger, uncapped):
        assert whole["chars_returned"] == whole["chars_total"] == total and "truncated" not in whole
        assert "[frugal: output truncated" not in content_of(whole)
        assert whole["est_tokens"] == -(-total // 4)
    assert smaller["chars_returned"] <= 300 < smaller["chars_total"] and smaller["truncated"] is True


async def test_search_results_are_measured_never_cut_unless_a_budget_names_the_route(
    tmp_path: Path, apis: FakeApis
) -> None:
    """README: "Search results are measured, never truncated. max_results is the size knob there,
    and est_tokens shows what a wide value costs." The governor's default budgets leave a routed
    search alone; each hit is bounded where it is rendered (a snippet over 2,000 characters ends
    with "…"; a hit whose URL is over 8,192 characters is left out, with a warning); a budget that
    names the route itself still shapes it."""
    tight = "[governor]\nmax_bytes = 2048\nmax_records = 5\n"
    wide = search_config(apis, "/wide", upstream=False)
    named = tight + '[governor.routes."frugal__search"]\nmax_bytes = 2048\n'
    with deadline(60):
        async with Client(serve(tmp_path / "a", write(tmp_path, tight + wide)), mode="auto", cache=None) as client:
            measured = await client.call_tool("frugal__search", {"query": "anything", "max_results": 40})
        (tmp_path / "named").mkdir()
        config = write(tmp_path / "named", named + wide)
        async with Client(serve(tmp_path / "b", config), mode="auto", cache=None) as client:
            shaped = await client.call_tool("frugal__search", {"query": "anything", "max_results": 40})
    body = structured(measured)
    assert len(body["results"]) == 39  # 40 asked for, one left out for its URL
    assert all(len(hit["url"]) <= 8_192 for hit in body["results"])
    first = body["results"][0]["snippet"]
    assert len(first) == 2_000 and first.endswith("…")
    assert all(len(hit["snippet"]) == 1_200 for hit in body["results"][1:])
    assert body["warnings"] == ["1 hit(s) left out: a URL over 8192 characters"]
    assert body["est_tokens"] > 39 * 1_200 // 4  # what the wide value costs, in the answer
    assert "frugal/governor" not in (measured.meta or {})
    assert measured.structured_content is not None
    cut = shaped.structured_content or {}
    assert len(cut.get("results", [])) < 39 and "frugal/governor" in (shaped.meta or {})
    assert apis.requests["wide"] == 2
