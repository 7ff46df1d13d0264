"""Provider names under `serve`: a name in `order`, `deny` or a provider table that names no
provider fails the config load (naming the key, the closest known name and all of them), a
`provider=` pin that names none is a tool error saying the same, and the `goreadability` alias
works wherever `readability` does. Pages come from a loopback server (tests/servers/page_server.py),
searches from tests/servers/fake_apis.py; every other built-in is off."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from frugal_proxy.providers import registry
from tests.e2e.test_routed_tools import serve, structured, write
from tests.pace import deadline, paced
from tests.servers.fake_apis import FakeApis, fake_apis
from tests.servers.page_server import PageServer, page_server

pytestmark = pytest.mark.anyio

OFF = "".join(
    f"[{builtin.capability}_providers.{builtin.name}]\nenabled = false\n"
    for builtin in registry.built_ins()
    if builtin.name not in ("wikipedia", "readability")
)


@pytest.fixture
def apis() -> Iterator[FakeApis]:
    with fake_apis() as running:
        yield running


@pytest.fixture
def pages() -> Iterator[PageServer]:
    with page_server() as served:
        yield served


def providers(apis: FakeApis, extra: str = "") -> str:
    return f'[search_providers.wikipedia]\nbase_url = "{apis.base}/wikipedia"\n{OFF}{extra}'


def run_cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FRUGAL_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "frugal_proxy", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=paced(60),
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            '[routing.search]\ndeny = ["wikipedai"]\n',
            "at routing.search.deny: 'wikipedai' is not one of the search providers "
            "(did you mean 'wikipedia'?); known: searxng,",
        ),
        (
            '[routing.extract]\norder = ["jina", "go-readability"]\n',
            "at routing.extract.order: 'go-readability' is not one of the extract providers "
            "(did you mean 'goreadability'?)",
        ),
        (
            "[extract_providers.readabilty]\ntimeout = '5s'\n",
            "at extract_providers.readabilty: 'readabilty' is not one of the built-in extract providers "
            "(did you mean 'readability'?); built-ins: readability, jina, firecrawl; a provider of your own",
        ),
    ],
)
@pytest.mark.parametrize("command", ["serve", "check"])
def test_an_unknown_provider_name_fails_the_config(
    tmp_path: Path, apis: FakeApis, extra: str, message: str, command: str
) -> None:
    config = write(tmp_path, providers(apis, extra))
    argv = ("serve", "--config", str(config)) if command == "serve" else ("config", "check", "--config", str(config))
    result = run_cli(*argv, home=tmp_path / "home")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_goreadability_is_readability_in_order_and_pins_and_a_typo_pin_says_so(
    tmp_path: Path, apis: FakeApis, pages: PageServer, mode: str
) -> None:
    extra = '[extract_providers.goreadability]\ntimeout = "10s"\n[routing.extract]\norder = ["goreadability"]\n'
    config = write(tmp_path, providers(apis, extra))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode=mode, cache=None) as client:  # type: ignore[arg-type]
            pinned = await client.call_tool(
                "frugal__extract", {"url": f"{pages.base}/article", "provider": "goreadability"}
            )
            typo = await client.call_tool("frugal__search", {"query": "proxy", "provider": "wikipedai"})
            off = await client.call_tool("frugal__search", {"query": "proxy", "provider": "brave"})
    body = structured(pinned)
    assert body["provider_used"] == "readability"
    assert "pinned to readability" in body["reason"]
    assert typo.is_error
    refusal = typo.content[0].text  # type: ignore[union-attr]
    assert "'wikipedai' is not one of the search providers (did you mean 'wikipedia'?); known: searxng," in refusal
    assert "; on: wikipedia" in refusal
    assert off.is_error  # a known provider that is off says why
    assert "brave is off: disabled in the config" in off.content[0].text  # type: ignore[union-attr]
    assert apis.requests.get("wikipedia", 0) == 0  # a refused pin calls nobody


async def test_a_deny_by_the_alias_denies_readability(tmp_path: Path, apis: FakeApis, pages: PageServer) -> None:
    config = write(tmp_path, providers(apis, '[routing.extract]\ndeny = ["goreadability"]\n'))
    with deadline(60):
        async with Client(serve(tmp_path / "home", config), mode="auto", cache=None) as client:
            refused = await client.call_tool("frugal__extract", {"url": f"{pages.base}/article"})
    assert refused.is_error
    assert "denied by routing.extract.deny" in refused.content[0].text  # type: ignore[union-attr]
    assert pages.requests == []  # the page was never fetched
