"""Which providers exist, which are on, and what they cost: the built-ins' declared defaults,
the config's `[<capability>_providers.NAME]` tables and the environment, in one place.

Each driver module declares one or more `Builtin`s (name, capability, list price, free quota,
premium or not, key variable, documented endpoint, timeout) and a `make` that builds the
provider from a `Setup`. A built-in is on when:

- the config says `enabled = true` (a keyed one still needs its key), else
- it needs no key (zero-key: on with no configuration), or its key variable is set,
- and whatever else it `needs` is there (SearXNG needs `SEARXNG_URL`, the local browser a
  Chromium binary).

A config table with `upstream` and `tool` is a provider served by that upstream's MCP tool
(providers.upstream_tool): the router binds it to its link. A table of a built-in's name that
names them serves that name from the tool instead of the built-in driver (a `[search_providers.
tavily]` written for the tavily-mcp server before Tavily had a driver keeps its meaning).
Built-ins are listed in their documented order, which is also how the cheap strategy breaks
ties; config-only providers follow in config-file order.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from frugal_proxy import money
from frugal_proxy.capabilities import CAPABILITIES
from frugal_proxy.config import CapabilityRouting, Config, ConfigError, ProviderConfig, unknown_name
from frugal_proxy.domains import DomainRules
from frugal_proxy.providers import Provider
from frugal_proxy.providers.http_client import HttpClient
from frugal_proxy.records import ProviderSpec

# The driver modules, in the documented order of their built-ins (ties in the cheap strategy
# keep it). A module that is missing here is not loaded.
DRIVERS: tuple[str, ...] = (
    "searxng",
    "youcom",
    "marginalia",
    "wikipedia",
    "serper",
    "brave",
    "tavily",
    "exa",
    "readability",
    "jina",
    "firecrawl",
    "browserless",
    "chromium",
)


@dataclass(frozen=True)
class Setup:
    """What a driver is built from: its spec (price and quota with the config's overrides), the
    base URL (the documented endpoint, or the config's `base_url`), its key, its request timeout,
    the shared HTTP client, its config table and the environment."""

    spec: ProviderSpec
    base_url: str
    key: str | None
    timeout: float
    http: HttpClient
    options: ProviderConfig
    environ: Mapping[str, str]
    domains: DomainRules | None = None  # routing.domains, for the fetchers that check every hop


@dataclass(frozen=True)
class Builtin:
    name: str
    capability: str
    make: Callable[[Setup], Provider]
    endpoint: str = ""
    price_micros: int = 0
    free_quota_monthly: int = 0
    premium: bool = False
    key_env: str | None = None  # the variable its key is read from (config: api_key_env)
    key_required: bool = False  # False: the key is optional (higher limits with it)
    needs: Callable[[Mapping[str, str]], str | None] | None = None  # what is missing, or None
    timeout: float = 20.0
    aliases: tuple[str, ...] = ()


@dataclass
class Enabled:
    """The providers that are on, and the ones served by upstream tools (bound by the router)."""

    providers: list[Provider] = field(default_factory=list)
    upstream_tools: list[tuple[ProviderSpec, ProviderConfig]] = field(default_factory=list)
    off: dict[str, str] = field(default_factory=dict)  # name -> why it is off (for `status` and logs)


def built_ins() -> list[Builtin]:
    found: list[Builtin] = []
    for module in DRIVERS:
        found.extend(importlib.import_module(f"frugal_proxy.providers.{module}").BUILTINS)
    return found


def enable(config: Config, environ: Mapping[str, str] | None = None, http: HttpClient | None = None) -> Enabled:
    """Every provider that is on for this config and environment, built."""
    env = dict(os.environ if environ is None else environ)
    client = http or HttpClient()
    enabled = Enabled()
    known: dict[tuple[str, str], Builtin] = {}
    for builtin in built_ins():
        for name in (builtin.name, *builtin.aliases):
            known[(builtin.capability, name)] = builtin
    for capability in CAPABILITIES:
        tables = config.providers_of(capability)
        seen: set[str] = set()
        for builtin in (b for b in built_ins() if b.capability == capability):
            options = _options_of(tables, builtin)
            if _upstream_served(options):  # the table serves the name from an upstream tool instead
                enabled.off[builtin.name] = f"served by [upstreams.{options.upstream}] tool {options.tool!r} instead"
                continue
            seen.update(name for name in (builtin.name, *builtin.aliases) if name in tables)
            made = _make(builtin, options, env, client, config.routing.domains.rules)
            if isinstance(made, str):
                enabled.off[builtin.name] = made
            else:
                enabled.providers.append(made)
        for name, options in tables.items():
            if name in seen or ((capability, name) in known and not _upstream_served(options)):
                continue
            if not _upstream_served(options):
                raise ValueError(
                    f"{capability}_providers.{name}: no built-in {capability} provider has this name; "
                    "a provider of your own names its 'upstream' and 'tool'"
                )
            if options.enabled is False:
                enabled.off[name] = "disabled in the config"
                continue
            spec = ProviderSpec(
                name,
                capability,
                options.price_micros or 0,
                free_quota_monthly=options.free_quota_monthly or 0,
                premium=bool(options.premium),
                endpoint=f"{options.upstream}.{options.tool}",
            )
            enabled.upstream_tools.append((spec, options))
    return enabled


def provider_names(config: Config) -> dict[str, dict[str, str]]:
    """Per capability, every name a provider of it answers to -> the provider's own name: each
    built-in's name and aliases (`goreadability` -> `readability`), on or off, in documented
    order, then the tables of your own (`upstream` + `tool`) in config order."""
    names: dict[str, dict[str, str]] = {capability: {} for capability in CAPABILITIES}
    for builtin in built_ins():
        for name in (builtin.name, *builtin.aliases):
            names[builtin.capability][name] = builtin.name
    for capability in CAPABILITIES:
        for name, options in config.providers_of(capability).items():
            if name not in names[capability] and options.upstream is not None:
                names[capability][name] = name
    return names


def check_names(config: Config, source: str = "<config>") -> None:
    """Every provider name the config writes (a provider table's, and each in `routing.*.order`
    and `.deny`) names a provider: ConfigError naming the key, the unknown name, the closest
    known one and all of them. A privacy `deny` with a typo would otherwise deny nothing."""
    names = provider_names(config)
    for builtin in built_ins():
        tables = config.providers_of(builtin.capability)
        spellings = [name for name in (builtin.name, *builtin.aliases) if name in tables]
        if len(spellings) > 1:
            raise ConfigError(
                f"{source}: at {builtin.capability}_providers.{spellings[1]}: {builtin.name} is configured "
                f"twice, as {' and '.join(f'[{builtin.capability}_providers.{name}]' for name in spellings)}; keep one"
            )
    for capability in CAPABILITIES:
        for name, options in config.providers_of(capability).items():
            if name not in names[capability] and (options.upstream is None or options.tool is None):
                builtins = [b.name for b in built_ins() if b.capability == capability]
                why = unknown_name(name, f"one of the built-in {capability} providers", builtins, "built-ins")
                raise ConfigError(
                    f"{source}: at {capability}_providers.{name}: {why}; "
                    "a provider of your own names its 'upstream' and 'tool'"
                )
        settings: CapabilityRouting = getattr(config.routing, capability)
        for key in ("order", "deny"):
            for name in getattr(settings, key):
                if name not in names[capability]:
                    why = unknown_name(name, f"one of the {capability} providers", names[capability])
                    raise ConfigError(f"{source}: at routing.{capability}.{key}: {why}")


def _upstream_served(options: ProviderConfig) -> bool:
    """Whether a table names an upstream tool that serves its provider."""
    return options.upstream is not None and options.tool is not None


def _options_of(tables: Mapping[str, ProviderConfig], builtin: Builtin) -> ProviderConfig:
    for name in (builtin.name, *builtin.aliases):
        if name in tables:
            return tables[name]
    return ProviderConfig()


def _make(
    builtin: Builtin,
    options: ProviderConfig,
    env: Mapping[str, str],
    http: HttpClient,
    domains: DomainRules | None = None,
) -> Provider | str:
    """The provider, or why it is off."""
    if options.enabled is False:
        return "disabled in the config"
    key_env = options.api_key_env or builtin.key_env
    key = env.get(key_env) if key_env else None
    if builtin.key_required and not key:
        return f"no key: set {key_env}"
    # A self-hosted provider (no documented endpoint) needs its URL; a config base_url is one.
    if builtin.needs is not None and not (options.base_url and not builtin.endpoint):
        missing = builtin.needs(env)
        if missing is not None:
            return missing
    price = options.price_micros
    spec = ProviderSpec(
        builtin.name,
        builtin.capability,
        builtin.price_micros if price is None else price,
        free_quota_monthly=builtin.free_quota_monthly
        if options.free_quota_monthly is None
        else options.free_quota_monthly,
        premium=builtin.premium if options.premium is None else options.premium,
        key_env=key_env,
        endpoint=builtin.endpoint,
    )
    setup = Setup(
        spec=spec,
        base_url=(options.base_url or builtin.endpoint).rstrip("/"),
        key=key,
        timeout=options.timeout_seconds or builtin.timeout,
        http=http,
        options=options,
        environ=env,
        domains=domains,
    )
    return builtin.make(setup)


def price_line(spec: ProviderSpec) -> str:
    """`serper $0.0010/call` as the docs and errors show a price."""
    return f"{spec.name} {money.format_usd(spec.price_micros)}/call"


def rack_rates(config: Config) -> dict[str, tuple[str, int]]:
    """Per capability, its premium rack rate as (provider, micro-dollars): the highest list price
    among its providers marked premium, or among all of them when none is. Every built-in counts,
    on or not (with the config's `cost_per_call` and `premium` overrides), and so does every
    provider of your own that is not disabled: the rate is what the premium route lists, not
    what this machine happens to have keys for. Ties go to the first in documented order."""
    rates: dict[str, tuple[str, int]] = {}
    for capability in CAPABILITIES:
        tables = config.providers_of(capability)
        priced: list[tuple[bool, int, str]] = []
        seen: set[str] = set()
        for builtin in (b for b in built_ins() if b.capability == capability):
            options = _options_of(tables, builtin)
            seen.update((builtin.name, *builtin.aliases))
            price = builtin.price_micros if options.price_micros is None else options.price_micros
            premium = builtin.premium if options.premium is None else options.premium
            priced.append((premium, price, builtin.name))
        for name, options in tables.items():
            if name not in seen and options.upstream is not None and options.enabled is not False:
                priced.append((bool(options.premium), options.price_micros or 0, name))
        pool = [entry for entry in priced if entry[0]] or priced
        if pool:
            _, price, name = max(pool, key=lambda entry: entry[1])
            rates[capability] = (name, price)
    return rates
