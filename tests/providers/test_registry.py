"""Which providers are on: zero-key ones with no configuration, keyed ones with their key,
`enabled = false` off, config-only names served by an upstream tool."""

from __future__ import annotations

import re
from decimal import Decimal

import httpx2
import pytest

from frugal_proxy import config as config_module
from frugal_proxy.config import Config, ProviderConfig
from frugal_proxy.providers import registry
from frugal_proxy.providers.registry import Builtin, Setup
from frugal_proxy.records import Exchange, Outcome
from tests.providers.api_fakes import client, enabled_names


class Echo:
    def __init__(self, setup: Setup) -> None:
        self.spec = setup.spec
        self.setup = setup

    async def call(self, exchange: Exchange) -> Outcome:
        return Outcome("empty")


FAKES = [
    Builtin("free-one", "search", Echo, endpoint="https://free.example"),
    Builtin(
        "keyed",
        "search",
        Echo,
        endpoint="https://keyed.example/api",
        price_micros=5_000,
        key_env="KEYED_KEY",
        key_required=True,
    ),
    Builtin("needs-url", "search", Echo, needs=lambda env: None if env.get("NEEDS_URL") else "set NEEDS_URL"),
    Builtin("reader", "extract", Echo, endpoint="https://reader.example", aliases=("old-reader",)),
]


@pytest.fixture(autouse=True)
def fake_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "built_ins", lambda: list(FAKES))


def test_zero_key_providers_are_on_with_no_configuration() -> None:
    assert enabled_names(Config(), {}) == ["free-one", "reader"]
    found = registry.enable(Config(), {}, client(lambda request: httpx2.Response(500)))
    assert found.off == {"keyed": "no key: set KEYED_KEY", "needs-url": "set NEEDS_URL"}


def test_a_key_or_what_a_provider_needs_turns_it_on() -> None:
    assert enabled_names(Config(), {"KEYED_KEY": "k", "NEEDS_URL": "http://127.0.0.1:8888"}) == [
        "free-one",
        "keyed",
        "needs-url",
        "reader",
    ]


def test_the_config_overrides_price_key_variable_and_base_url() -> None:
    config = config_module.loads(
        """
        [search_providers.keyed]
        api_key_env = "MY_KEY"
        cost_per_call = 0.0042
        free_quota_monthly = 100
        base_url = "http://127.0.0.1:9000/v2/"
        [search_providers.free-one]
        enabled = false
        [extract_providers.old-reader]
        timeout = "45s"
        """,
        environ={},
    )
    found = registry.enable(config, {"MY_KEY": "secret"}, client(lambda request: httpx2.Response(500)))
    keyed, reader = found.providers
    assert keyed.spec.price_micros == 4_200 and keyed.spec.free_quota_monthly == 100 and keyed.spec.key_env == "MY_KEY"
    assert (
        isinstance(keyed, Echo) and keyed.setup.key == "secret" and keyed.setup.base_url == "http://127.0.0.1:9000/v2"
    )
    assert isinstance(reader, Echo) and reader.setup.timeout == 45.0  # configured under its alias
    assert found.off["free-one"] == "disabled in the config"


def test_a_name_of_your_own_is_served_by_an_upstream_tool() -> None:
    config = config_module.loads(
        """
        [upstreams.tavily]
        command = ["tavily-mcp"]
        [search_providers.tavily]
        upstream = "tavily"
        tool = "tavily-search"
        args = { query = "{query}", max_results = "{max_results}" }
        cost_per_call = 0.008
        """,
        environ={},
    )
    found = registry.enable(config, {}, client(lambda request: httpx2.Response(500)))
    ((spec, options),) = found.upstream_tools
    assert (spec.name, spec.capability, spec.price_micros, spec.endpoint) == (
        "tavily",
        "search",
        8_000,
        "tavily.tavily-search",
    )
    assert options.args == {"query": "{query}", "max_results": "{max_results}"}


def test_a_built_ins_name_whose_table_names_an_upstream_tool_is_served_by_that_tool() -> None:
    """A table written for an upstream's tool before a driver of the same name existed keeps its
    meaning: the tool serves the name, the built-in driver stays off."""
    config = config_module.loads(
        """
        [upstreams.mine]
        command = ["mine-mcp"]
        [search_providers.keyed]
        upstream = "mine"
        tool = "search"
        cost_per_call = 0.008
        """,
        environ={},
    )
    found = registry.enable(config, {"KEYED_KEY": "k"}, client(lambda request: httpx2.Response(500)))
    assert [provider.spec.name for provider in found.providers] == ["free-one", "reader"]
    ((spec, options),) = found.upstream_tools
    assert (spec.name, spec.price_micros, spec.endpoint, options.tool) == ("keyed", 8_000, "mine.search", "search")
    assert found.off["keyed"] == "served by [upstreams.mine] tool 'search' instead"


def test_an_unknown_name_without_an_upstream_tool_is_refused() -> None:
    config = Config(search_providers={"serpapi": ProviderConfig(cost_per_call=Decimal("0.01"))})
    with pytest.raises(ValueError, match=r"search_providers\.serpapi: no built-in search provider has this name"):
        registry.enable(config, {}, client(lambda request: httpx2.Response(500)))


def test_a_self_hosted_provider_is_on_with_a_config_base_url_instead_of_its_variable() -> None:
    config = config_module.loads('[search_providers.needs-url]\nbase_url = "http://127.0.0.1:8888"\n', environ={})
    assert "needs-url" in enabled_names(config, {})


def test_rack_rates_are_the_premium_list_prices_on_or_not() -> None:
    # No provider is premium: the highest list price, keyed's, though its key is not set.
    assert registry.rack_rates(config_module.loads("")) == {"search": ("keyed", 5_000), "extract": ("reader", 0)}
    config = config_module.loads(
        "[upstreams.tavily]\ncommand = ['tavily']\n"
        "[search_providers.tavily]\nupstream = 'tavily'\ntool = 'search'\ncost_per_call = 0.008\npremium = true\n"
        "[search_providers.keyed]\ncost_per_call = 0.003\npremium = true\n"
        "[extract_providers.old-reader]\ncost_per_call = 0.001\n"
        "[extract_providers.mine]\nupstream = 'tavily'\ntool = 'x'\ncost_per_call = 0.004\nenabled = false\n"
    )
    assert registry.rack_rates(config) == {"search": ("tavily", 8_000), "extract": ("reader", 1_000)}


def test_provider_names_are_the_built_ins_with_their_aliases_and_your_own() -> None:
    config = config_module.loads(
        "[upstreams.t]\ncommand = ['t']\n[search_providers.mine]\nupstream = 't'\ntool = 'search'\n", environ={}
    )
    names = registry.provider_names(config)
    assert names["search"] == {"free-one": "free-one", "keyed": "keyed", "needs-url": "needs-url", "mine": "mine"}
    assert names["extract"] == {"reader": "reader", "old-reader": "reader"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[routing.search]\ndeny = ["keyd"]',
            "f.toml: at routing.search.deny: 'keyd' is not one of the search providers (did you mean 'keyed'?); "
            "known: free-one, keyed, needs-url",
        ),
        ('[routing.extract]\norder = ["reader", "raeder"]', "at routing.extract.order: 'raeder' is not one"),
        (
            "[search_providers.kyed]\nenabled = true",
            "at search_providers.kyed: 'kyed' is not one of the built-in search providers (did you mean 'keyed'?); "
            "built-ins: free-one, keyed, needs-url; a provider of your own names its 'upstream' and 'tool'",
        ),
        (
            "[extract_providers.reader]\nenabled = true\n[extract_providers.old-reader]\nenabled = false",
            "at extract_providers.old-reader: reader is configured twice, as [extract_providers.reader] and "
            "[extract_providers.old-reader]; keep one",
        ),
    ],
)
def test_a_name_that_names_no_provider_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(config_module.ConfigError, match=re.escape(message)):
        registry.check_names(config_module.loads(text, environ={}), "f.toml")


def test_aliases_and_your_own_names_pass_the_check() -> None:
    registry.check_names(
        config_module.loads(
            "[upstreams.t]\ncommand = ['t']\n[search_providers.mine]\nupstream = 't'\ntool = 'search'\n"
            '[extract_providers.old-reader]\nenabled = true\n[routing.extract]\ndeny = ["old-reader"]\n'
            '[routing.search]\norder = ["mine", "keyed"]\n',
            environ={},
        )
    )
