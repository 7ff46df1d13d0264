"""`frugal-proxy config import`: the sample models.yaml (examples/models.yaml) carried over key by
key, every key it could not carry named, and the file handling of --out and --force."""

from __future__ import annotations

import sys
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from frugal_proxy import config as config_module
from frugal_proxy.cli import config_import
from frugal_proxy.cli.config_import import _DURATION_KEY as DURATION_KEY
from frugal_proxy.cli.config_import import convert, import_command, read_yaml
from frugal_proxy.providers import registry
from frugal_proxy.providers.registry import Builtin

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "models.yaml"
BUILT_INS = [
    Builtin(name, capability, lambda setup: None, aliases=aliases)  # type: ignore[arg-type, return-value]
    for name, capability, aliases in [
        ("wikipedia", "search", ()),
        ("serper", "search", ()),
        ("brave", "search", ()),
        ("readability", "extract", ("goreadability",)),
        ("firecrawl", "extract", ()),
        ("browserless", "browse", ()),
    ]
]


@pytest.fixture(autouse=True)
def built_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "built_ins", lambda: list(BUILT_INS))


def leaves(data: dict[str, Any], path: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict) and value:
            found.update(leaves(value, where))
        else:
            found[where] = value
    return found


def test_every_supported_key_is_carried_and_every_other_named() -> None:
    source = read_yaml(SAMPLE)
    imported = convert(source)
    text = imported.toml("models.yaml")
    written = tomllib.loads(text, parse_float=Decimal)
    loaded = config_module.loads(text)  # what serve would read: valid as it is
    carried, dropped = leaves(written), [path for path, _ in imported.dropped]
    for path, value in leaves(source).items():
        left_out = any(path == d or path.startswith(d + ".") for d in dropped)
        assert (path in carried) != left_out, f"{path}: carried {path in carried}, named {left_out}"
        if path in carried and not DURATION_KEY.search(path.rsplit(".", 1)[-1]):  # seconds become "60s"
            assert carried[path] == value, path
    # What frugal-proxy has today, carried exactly (prices as decimals, seconds as durations).
    serper = loaded.search_providers["serper"]
    assert (serper.api_key_env, serper.cost_per_call, serper.free_quota_monthly) == (
        "SERPER_API_KEY",
        Decimal("0.001"),
        2500,
    )
    assert serper.timeout == "20s" and loaded.browse_providers["browserless"].timeout == "90s"
    assert loaded.search_providers["wikipedia"].base_url == "https://en.wikipedia.org"
    assert loaded.extract_providers["goreadability"].enabled is True
    assert loaded.extract_providers["firecrawl"].premium is True
    assert (loaded.routing.search.order, loaded.routing.search.deny) == (["wikipedia", "serper"], ["brave"])
    assert loaded.routing.browse.strategy == "premium" and loaded.limits.call_timeout == "45s"
    # What it cannot carry, each named with the reason.
    reasons = dict(imported.dropped)
    assert "'fastest'" in reasons["routing.extract.strategy"]
    assert reasons["models"] == reasons["routing.crawl"] == "frugal-proxy has no such setting"
    assert reasons["search_providers.nosuch"].startswith("no built-in search provider is named 'nosuch'")
    assert reasons["search_providers.tavily"] == "no [upstreams.tavily] is configured"
    for path, why in imported.dropped:
        assert f"#   {path}: {why}" in text


def test_a_provider_of_your_own_is_carried_with_its_upstream() -> None:
    imported = convert(
        {
            "upstreams": {"tavily": {"command": ["npx", "tavily-mcp"], "env": {"KEY": "${TAVILY_KEY}"}}},
            "search_providers": {
                "tavily": {"upstream": "tavily", "tool": "search", "args": {"query": "{query}"}, "cost_per_call": 0},
            },
        }
    )
    assert imported.dropped == []
    text = imported.toml("models.yaml")
    assert 'args = {query = "{query}"}' in text and 'env = {KEY = "${TAVILY_KEY}"}' in text
    loaded = config_module.loads(text, environ={"TAVILY_KEY": "k"})
    assert loaded.search_providers["tavily"].args == {"query": "{query}"}


def test_values_of_the_wrong_kind_and_empty_ones_are_named() -> None:
    imported = convert({"limits": {"call_timeout": "soon", "page_size": "many"}, "routing": {"search": None}})
    assert [path for path, _ in imported.dropped] == ["limits.page_size", "routing.search", "limits.call_timeout"]
    assert imported.data == {}


def test_a_daily_budget_of_zero_keeps_its_meaning_no_cap() -> None:
    """The routing README: "Zero or absent means no cap"; carried as 0, it means that here too."""
    imported = convert({"search_providers": {"serper": {"daily_budget_usd": 0}, "brave": {"daily_budget_usd": 0.16}}})
    loaded = config_module.loads(imported.toml("models.yaml"))
    assert loaded.search_providers["serper"].daily_budget_micros is None
    assert loaded.search_providers["brave"].daily_budget_micros == 160_000


def test_a_cache_that_is_off_stays_off() -> None:
    """A TTL of "0" turns that capability's caching off (the routing README); it is carried as
    it is, not dropped for the default's 5m."""
    imported = convert({"cache": {"enabled": True, "search_ttl": "0", "extract_ttl": "10m"}})
    assert imported.dropped == []
    loaded = config_module.loads(imported.toml("models.yaml"))
    assert loaded.cache.ttl("search") is None and loaded.cache.ttl("extract") == 600.0


def test_max_chars_is_carried_as_the_page_default() -> None:
    imported = convert({"limits": {"max_chars": 40000}})
    assert imported.dropped == []
    assert config_module.loads(imported.toml("models.yaml")).limits.max_chars == 40_000


def run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = import_command(*args)  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    return code, out, err


def test_stdout_out_and_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(str(SAMPLE), None, False, capsys=capsys)
    assert code == 0 and out.startswith("# Imported from models.yaml") and "[routing.search]" in out
    assert "key(s) of" in err and "models: frugal-proxy has no such setting" in err
    target = tmp_path / "frugal.toml"
    assert run(str(SAMPLE), str(target), False, capsys=capsys)[0] == 0
    assert target.read_text() == out
    target.write_text("# mine\n")
    code, _, err = run(str(SAMPLE), str(target), False, capsys=capsys)
    assert code == 1 and "exists; use --force" in err and target.read_text() == "# mine\n"
    assert run(str(SAMPLE), str(target), True, capsys=capsys)[0] == 0 and target.read_text() == out


def test_unreadable_input_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(str(tmp_path / "missing.yaml"), None, False, capsys=capsys)[0] == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("search_providers: [unclosed\n")
    code, _, err = run(str(broken), None, False, capsys=capsys)
    assert code == 2 and "not valid YAML" in err
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    code, _, err = run(str(listed), None, False, capsys=capsys)
    assert code == 2 and "expected a mapping of settings at the top level" in err


def test_without_pyyaml_it_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now raises ImportError
    code, _, err = run(str(SAMPLE), None, False, capsys=capsys)
    assert code == 2 and err.strip() == config_import.YAML_MISSING
    assert "pip install 'frugal-proxy[yaml]'" in err
