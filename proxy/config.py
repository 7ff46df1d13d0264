"""The configuration file: TOML read with tomllib into typed msgspec structs.

Where it is: `--config FILE`, else `$FRUGAL_CONFIG`, else `$FRUGAL_HOME/config/frugal.toml`
(`FRUGAL_HOME` defaults to `~/.frugal`). Every error names the file, the key path and what was
expected; an unknown key is an error, never a silent no-op. `${VAR}` in `env`, `headers` and
`url` values is replaced from the environment, and a variable that is not set is an error.
Secrets come from the environment only.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib.util
import math
import os
import re
import tomllib
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs, urlsplit

import msgspec

from frugal_proxy import home, money
from frugal_proxy.domains import DomainRules, rule_error
from frugal_proxy.identities import configured_tokens

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
T = TypeVar("T")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message says where and why."""


def unknown_name(name: str, what: str, known: Iterable[str], label: str = "known") -> str:
    """Why `name` is refused: it is not `what`, the closest of the `known` names if one is close
    (a typo), and all of them: `'serpr' is not one of the search providers (did you mean
    'serper'?); known: …`."""
    names = list(dict.fromkeys(known))
    folded = {known_name.casefold(): known_name for known_name in names}
    close = difflib.get_close_matches(name.casefold(), list(folded), n=1)
    hint = f" (did you mean {folded[close[0]]!r}?)" if close else ""
    return f"{name!r} is not {what}{hint}; {label}: {', '.join(names) or 'none'}"


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration: `90s`, `2m`, `1h30m`, `250ms`, and `0` (as Go reads it)."""
    if text == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        raise ValueError(f"{text!r} is not a duration; write it like '90s', '2m' or '1h30m'")
    return total


def format_duration(seconds: float) -> str:
    """A duration as Go writes it: `48s`, `1m0s`, `1h2m3s`, and under a second `500ms`; rounded
    up (to the second, or the millisecond under one), so a wait it names is never too short."""
    millis = math.ceil(seconds * 1000 - 1e-6)
    if 0 < millis < 1000:
        return f"{millis}ms"
    whole = max(0, math.ceil(seconds - 1e-9))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


class ToolFilter(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[upstreams.NAME] tools`: glob lists on the upstream's own tool names. A tool they hide is
    neither listed nor called, by its own name or as a route's candidate or provider."""

    allow: list[str] = []
    deny: list[str] = []

    def hides(self, tool: str, upstream: str) -> str | None:
        """Why the filter of the upstream `upstream` hides `tool`, naming the key (None: exposed)."""
        where = f"upstreams.{_key(upstream)}.tools"
        if self.allow and not any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.allow):
            return f"not matched by {where}.allow"
        pattern = next((pattern for pattern in self.deny if fnmatch.fnmatchcase(tool, pattern)), None)
        return None if pattern is None else f"denied by {where}.deny ({pattern!r})"


class Upstream(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One upstream MCP server: a command to run over stdio, or the URL of a remote one."""

    command: list[str] | None = None
    url: str | None = None
    env: dict[str, str] = {}
    headers: dict[str, str] = {}
    cwd: str | None = None
    prefix: str | None = None
    lazy: bool = False
    timeout: str | None = None
    connect_timeout: str | None = None
    read_timeout: str | None = None
    cost_per_call: Decimal = Decimal(0)  # USD, exact (the file is read with parse_float=Decimal)
    loop_guard: bool = False  # its tools' identical calls count against routing.loop_limit too
    url_arguments: list[str] = []  # its tools' arguments that name a URL: routing.domains checks them
    share: bool = True  # session-era HTTP sessions may share one connection to it (docs/http.md)
    tools: ToolFilter = ToolFilter()

    @property
    def price_micros(self) -> int:
        """`cost_per_call` in micro-dollars (checked at load time)."""
        return money.to_micros(self.cost_per_call, "cost_per_call")

    @property
    def timeout_seconds(self) -> float | None:
        return parse_duration(self.timeout) if self.timeout is not None else None

    @property
    def connect_timeout_seconds(self) -> float:
        return parse_duration(self.connect_timeout) if self.connect_timeout is not None else 10.0

    @property
    def read_timeout_seconds(self) -> float | None:
        return parse_duration(self.read_timeout) if self.read_timeout is not None else None


PLAIN_CALL_TIMEOUT = 300.0  # a plain upstream tool's deadline when limits.call_timeout is not set
ROUTED_CALL_TIMEOUT = 60.0  # a routed call's whole chain, when it is not set
MAX_RETRIES = 5


class Limits(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    # Unset: 5m for a plain tool (unless its upstream sets its own `timeout`), 60s over a routed
    # call's whole failover chain. Set, it is both; "0s" turns the routed deadline off.
    call_timeout: str | None = None
    # How often a free provider of a routed tool is tried again after a transient error (0: never).
    retries: int = 2
    max_message_bytes: int = 64 * 1024 * 1024
    page_size: int = 500
    # The default page-content budget of frugal__extract, frugal__browse and a URL intent of
    # frugal__execute, in characters; a call's `max_chars` overrides it either way (0: no cap).
    max_chars: int = 0
    # Upstream connections (processes, for a stdio upstream) the HTTP endpoint keeps per upstream
    # for its 2026-07-28 clients' distinct root sets (bridge.root_sets).
    root_sets: int = 16

    @property
    def call_timeout_seconds(self) -> float:
        """The deadline of a plain tool's call."""
        return parse_duration(self.call_timeout) if self.call_timeout is not None else PLAIN_CALL_TIMEOUT

    @property
    def routed_timeout_seconds(self) -> float | None:
        """The deadline over a routed call's whole chain; None when it is turned off ("0s")."""
        if self.call_timeout is None:
            return ROUTED_CALL_TIMEOUT
        return parse_duration(self.call_timeout) or None


class OperatorEntry(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[auth.operators.NAME]`: an operator of the HTTP endpoint and where its token is."""

    token_env: str


class Auth(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[auth]`: the HTTP endpoint's operators (FRUGAL_AUTH_TOKEN adds the operator `default`)."""

    open_registration: bool = False
    max_registered: int = 1000
    operators: dict[str, OperatorEntry] = {}


Mode = Literal["records", "lines", "text"]
MIN_BYTES = 1024
SPILL_MAX_TTL = 3600.0
SPILL_DEFAULT_QUOTA_BYTES = 256 * 1024 * 1024
SPILL_DEFAULT_SHARED_BYTES = 64 * 1024 * 1024  # `[state] spill_max_bytes`
SPILL_SHARED_LIMIT = 512 * 1024 * 1024  # Redis's largest string (proto-max-bulk-len's default)


class Budget(msgspec.Struct, frozen=True):
    """One route's limits. `max_tokens` is a planning figure: chars / 4, rounded up.
    `content_chars`: a routed page's `max_chars` (the call's, else `limits.max_chars`): its
    content fields (markdown, text, html) share exactly this many characters, and the route's
    other limits do not apply to them."""

    max_bytes: int = 32_768
    max_records: int = 50
    max_tokens: int = 8_192
    mode: Mode | None = None
    content_chars: int | None = None

    @property
    def max_chars(self) -> int:
        return self.max_tokens * 4


class RouteBudget(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """`[governor.routes."TOOL"]`: one exposed tool's overrides; what is left out comes from the
    governor's defaults."""

    max_bytes: int | None = None
    max_records: int | None = None
    max_tokens: int | None = None
    mode: Mode | None = None

    def __post_init__(self) -> None:
        _check_limits(self.max_bytes, self.max_records, self.max_tokens)


class GovernorSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`[governor]`: default budgets, per-route overrides and the spill store's bounds.
    `spill_ttl` is in seconds (at most 3600; the file may write it as a duration, `"30m"`);
    `spill_quota_bytes` is per operator."""

    enabled: bool = True
    max_bytes: int = 32_768
    max_records: int = 50
    max_tokens: int = 8_192
    mode: Mode | None = None
    spill_ttl: float = SPILL_MAX_TTL
    spill_quota_bytes: int = SPILL_DEFAULT_QUOTA_BYTES
    routes: dict[str, RouteBudget] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_limits(self.max_bytes, self.max_records, self.max_tokens)
        if not 0 < self.spill_ttl <= SPILL_MAX_TTL:
            raise ValueError(f"spill_ttl must be more than 0 and at most {SPILL_MAX_TTL:g} seconds")
        if self.spill_quota_bytes < 1:
            raise ValueError("spill_quota_bytes must be positive")

    def budget(self, route: str) -> Budget:
        """The budget of one exposed tool: its overrides over the defaults."""
        override = self.routes.get(route, RouteBudget())
        return Budget(
            max_bytes=override.max_bytes or self.max_bytes,
            max_records=override.max_records or self.max_records,
            max_tokens=override.max_tokens or self.max_tokens,
            mode=override.mode or self.mode,
        )


def _check_limits(max_bytes: int | None, max_records: int | None, max_tokens: int | None) -> None:
    if max_bytes is not None and max_bytes < MIN_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_BYTES}")
    if max_records is not None and max_records < 1:
        raise ValueError("max_records must be at least 1")
    if max_tokens is not None and max_tokens < MIN_BYTES // 4:
        raise ValueError(f"max_tokens must be at least {MIN_BYTES // 4}")


class ProviderConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[search_providers.NAME]` (and `extract_providers`, `browse_providers`): a built-in
    provider's settings, or a provider of your own served by a tool of an upstream MCP server
    (`upstream` + `tool`, with `args` templates and a `results` mapping). What is left out keeps
    the built-in's documented default."""

    enabled: bool | None = None  # default: zero-key providers on; keyed ones when their key is set
    api_key_env: str | None = None
    cost_per_call: Decimal | None = None  # USD per call, exact
    free_quota_monthly: int | None = None
    premium: bool | None = None
    base_url: str | None = None  # replaces scheme, host and path prefix of the documented endpoint
    timeout: str | None = None
    daily_budget_usd: Decimal | None = None  # USD a UTC day, exact; once spent the provider is skipped; 0: no cap
    upstream: str | None = None
    tool: str | None = None
    args: dict[str, Any] = {}
    results: dict[str, str] = {}

    @property
    def price_micros(self) -> int | None:
        return None if self.cost_per_call is None else money.to_micros(self.cost_per_call, "cost_per_call")

    @property
    def timeout_seconds(self) -> float | None:
        return parse_duration(self.timeout) if self.timeout is not None else None

    @property
    def daily_budget_micros(self) -> int | None:
        """The daily cap in micro-dollars; None (no cap) when it is absent or zero."""
        if self.daily_budget_usd is None:
            return None
        return money.to_micros(self.daily_budget_usd, "daily_budget_usd") or None


Strategy = Literal["cheap", "fast", "premium"]


class CapabilityRouting(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[routing.search]` (`extract`, `browse`): how one capability's providers are ordered.
    `order` is a preference (a prefix, not a whitelist); `deny` is never called, not even when
    pinned by name."""

    strategy: Strategy = "cheap"
    order: list[str] = []
    deny: list[str] = []


class ToolRoute(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[routes.NAME]`: one exposed tool, NAME, served by the tools of several upstreams
    (`candidates`, each `UPSTREAM.TOOL`: replicas or equivalent servers), ordered and failed over
    like a capability's providers (`strategy`, `order`, `deny` name candidates as written)."""

    candidates: list[str] = []
    strategy: Strategy = "cheap"
    order: list[str] = []
    deny: list[str] = []

    @property
    def routing(self) -> CapabilityRouting:
        return CapabilityRouting(self.strategy, list(self.order), list(self.deny))


def split_candidate(candidate: str, upstreams: Iterable[str]) -> tuple[str, str] | None:
    """`UPSTREAM.TOOL` as (upstream, tool), split at the first dot (an upstream's name has
    none; a tool's may), or None when the upstream is not configured."""
    upstream, dot, tool = candidate.partition(".")
    if not dot or not tool or upstream not in upstreams:
        return None
    return upstream, tool


COOLDOWN_DEFAULT = 60.0


class Domains(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[routing.domains]`: which hosts a routed call may fetch (proxy.domains reads the rules)."""

    allow: list[str] = []
    deny: list[str] = []
    deny_private: bool = False

    @property
    def rules(self) -> DomainRules:
        return DomainRules.of(self.allow, self.deny, self.deny_private)


class Routing(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    search: CapabilityRouting = CapabilityRouting()
    extract: CapabilityRouting = CapabilityRouting()
    browse: CapabilityRouting = CapabilityRouting()
    # How long a provider that answered 429 is fenced off (extended to its Retry-After). An
    # invalid value is not fatal: the assembly warns and uses the default.
    cooldown: str = "60s"
    # The loop guard: identical calls beyond loop_limit inside loop_window are refused (0: off).
    loop_limit: int = 5
    loop_window: str = "60s"
    domains: Domains = Domains()

    @property
    def loop_window_seconds(self) -> float:
        return parse_duration(self.loop_window)

    @property
    def cooldown_seconds(self) -> float | None:
        """The cooldown window, or None when `cooldown` is not a duration."""
        try:
            return parse_duration(self.cooldown)
        except ValueError:
            return None


class CacheSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[cache]`: the routed tools' result cache, in memory (off unless `enabled = true`)."""

    enabled: bool = False
    search_ttl: str = "5m"
    extract_ttl: str = "15m"
    max_entries: int = 512

    def ttl(self, capability: str) -> float | None:
        """How long a capability's answers are kept; None: never cached (browse, or a TTL of
        `"0"`: that capability's caching is off)."""
        ttl = {"search": self.search_ttl, "extract": self.extract_ttl}.get(capability)
        return (parse_duration(ttl) or None) if ttl is not None else None


REDIS_SCHEMES = ("redis", "rediss", "unix")
REDIS_URL_ENV = "FRUGAL_REDIS_URL"  # the whole URL, a password included
REDIS_PASSWORD_ENV = "FRUGAL_REDIS_PASSWORD"  # or the password alone, beside a `url` in the file
REDIS_DEFAULT_URL = "redis://127.0.0.1:6379/0"


class StateSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[state]`: where the state that outlives a call lives. `memory` (the default): this
    process; `redis`: a Redis (or Valkey) shared by several replicas."""

    backend: Literal["memory", "redis"] = "memory"
    url: str = ""  # redis://, rediss:// or unix://; FRUGAL_REDIS_URL wins; never a password
    prefix: str = "frugal:"
    pool_size: int = 16
    connect_timeout: str = "1s"
    timeout: str = "500ms"  # of every Redis command
    # The largest spill artifact kept in Redis; a larger one stays on the replica that cut it.
    spill_max_bytes: int = SPILL_DEFAULT_SHARED_BYTES

    @property
    def connect_timeout_seconds(self) -> float:
        return parse_duration(self.connect_timeout)

    @property
    def timeout_seconds(self) -> float:
        return parse_duration(self.timeout)

    def redis_url(self, environ: dict[str, str] | None = None) -> tuple[str, str | None]:
        """The URL to connect to and the password from the environment (None: none)."""
        env = os.environ if environ is None else environ
        url = env.get(REDIS_URL_ENV) or self.url or REDIS_DEFAULT_URL
        return url, env.get(REDIS_PASSWORD_ENV) or None


def redis_url_error(url: str) -> str | None:
    """What is wrong with a Redis URL, or None."""
    parts = urlsplit(url)
    if parts.scheme not in REDIS_SCHEMES:
        return f"{url.split('://')[0]!r} is not a Redis URL scheme; use redis://, rediss:// or unix://"
    if parts.scheme == "unix" and not parts.path:
        return "a unix:// URL needs the socket's path (unix:///run/redis/redis.sock)"
    if parts.scheme != "unix" and not parts.hostname:
        return "the URL has no host (redis://127.0.0.1:6379/0)"
    return None


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    upstreams: dict[str, Upstream] = {}
    limits: Limits = Limits()
    auth: Auth = Auth()
    governor: GovernorSettings = GovernorSettings()
    search_providers: dict[str, ProviderConfig] = {}
    extract_providers: dict[str, ProviderConfig] = {}
    browse_providers: dict[str, ProviderConfig] = {}
    routing: Routing = Routing()
    cache: CacheSettings = CacheSettings()
    routes: dict[str, ToolRoute] = {}
    state: StateSettings = StateSettings()

    def providers_of(self, capability: str) -> dict[str, ProviderConfig]:
        """The `[<capability>_providers.NAME]` tables."""
        tables: dict[str, ProviderConfig] = getattr(self, f"{capability}_providers")
        return tables


def config_path(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get("FRUGAL_CONFIG"):
        return Path(os.environ["FRUGAL_CONFIG"])
    return home.config_file()


def load(path: Path, environ: dict[str, str] | None = None) -> Config:
    """Read, validate and expand one config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file (frugal-proxy config init writes a starter)") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    return loads(text, str(path), environ)


def loads(text: str, source: str = "<config>", environ: dict[str, str] | None = None) -> Config:
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    tables = data.pop("upstreams", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: at upstreams: expected a table of [upstreams.NAME] tables")
    governor = data.pop("governor", {})
    auth = data.pop("auth", {})
    # Tables of named tables are converted one by one, so that an error names the entry.
    named = {
        key: _named(data.pop(key, {}), kind, source, key)
        for key, kind in (
            ("search_providers", ProviderConfig),
            ("extract_providers", ProviderConfig),
            ("browse_providers", ProviderConfig),
            ("routes", ToolRoute),
        )
    }
    backend = data.get("state", {}).get("backend", "memory") if isinstance(data.get("state"), dict) else "memory"
    if backend not in ("memory", "redis"):
        raise ConfigError(
            f"{source}: at state.backend: {backend!r} is not a backend; use 'memory' (this process) "
            "or 'redis' (shared by replicas)"
        )
    config = msgspec.structs.replace(_convert(data, Config, source, ""), **named)
    config = msgspec.structs.replace(config, governor=_load_governor(governor, source))
    upstreams_raw = {name: _convert(table, Upstream, source, f"upstreams.{name}") for name, table in tables.items()}
    config = msgspec.structs.replace(config, upstreams=upstreams_raw)
    env = dict(os.environ if environ is None else environ)
    upstreams = {name: _check_upstream(source, name, up, env) for name, up in config.upstreams.items()}
    config = msgspec.structs.replace(config, auth=_load_auth(auth, source, env))
    if config.limits.page_size < 1 or config.limits.max_message_bytes < 1024:
        raise ConfigError(f"{source}: at limits: page_size must be >= 1 and max_message_bytes >= 1024")
    if config.limits.max_chars < 0:
        raise ConfigError(f"{source}: at limits.max_chars: must not be negative (0, the default, is no cap)")
    try:
        config.limits.call_timeout_seconds  # noqa: B018 - validates the duration
    except ValueError as exc:
        raise ConfigError(f"{source}: at limits.call_timeout: {exc}") from None
    if config.routing.loop_limit < 0:
        raise ConfigError(f"{source}: at routing.loop_limit: must not be negative (0 turns the loop guard off)")
    try:
        if config.routing.loop_window_seconds <= 0:
            raise ValueError("must be longer than 0s")
    except ValueError as exc:
        raise ConfigError(f"{source}: at routing.loop_window: {exc}") from None
    for key in ("allow", "deny"):
        for number, rule in enumerate(getattr(config.routing.domains, key)):
            why = rule_error(rule)
            if why is not None:
                raise ConfigError(f"{source}: at routing.domains.{key}[{number}]: {why}")
    for key in ("search_ttl", "extract_ttl"):
        try:
            parse_duration(getattr(config.cache, key))
        except ValueError as exc:
            raise ConfigError(f"{source}: at cache.{key}: {exc}") from None
    if config.cache.max_entries < 1:
        raise ConfigError(f"{source}: at cache.max_entries: must be at least 1")
    if config.limits.root_sets < 1:
        raise ConfigError(f"{source}: at limits.root_sets: must be at least 1 (connections per upstream)")
    if not 0 <= config.limits.retries <= MAX_RETRIES:
        raise ConfigError(f"{source}: at limits.retries: 0 to {MAX_RETRIES} (0 turns retries off)")
    for capability in ("search", "extract", "browse"):
        for name, provider in config.providers_of(capability).items():
            _check_provider(source, f"{capability}_providers.{_key(name)}", provider, upstreams)
    for name, route in config.routes.items():
        _check_route(source, name, route, upstreams)
    _check_state(source, config.state, env)
    return msgspec.structs.replace(config, upstreams=upstreams)


_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _check_route(source: str, name: str, route: ToolRoute, upstreams: dict[str, Upstream]) -> None:
    at = f"{source}: at routes.{_key(name)}"
    if not _TOOL_NAME.fullmatch(name) or name.startswith("frugal__"):
        raise ConfigError(
            f"{at}: {name!r} is not a tool name this route can expose "
            "(1 to 64 of A-Z a-z 0-9 _ . -, not starting with frugal__)"
        )
    if not route.candidates:
        raise ConfigError(f'{at}.candidates: name the tools that serve it, e.g. candidates = ["a.search", "b.search"]')
    for number, candidate in enumerate(route.candidates):
        split = split_candidate(candidate, upstreams)
        if split is None:
            raise ConfigError(
                f"{at}.candidates[{number}]: {candidate!r} is not UPSTREAM.TOOL of a configured upstream "
                f"(upstreams: {', '.join(upstreams) or 'none'})"
            )
        _check_not_hidden(f"{at}.candidates[{number}]", *split, upstreams)
    if len(set(route.candidates)) != len(route.candidates):
        raise ConfigError(f"{at}.candidates: a candidate is named twice")
    for key in ("order", "deny"):
        for candidate in getattr(route, key):
            if candidate not in route.candidates:
                why = unknown_name(candidate, "one of its candidates", route.candidates, "candidates")
                raise ConfigError(f"{at}.{key}: {why}")


def _check_state(source: str, state: StateSettings, env: dict[str, str]) -> None:
    """`[state]`: durations, sizes, a URL with no password in the file, and the client installed."""
    if state.backend == "redis" and importlib.util.find_spec("redis") is None:
        raise ConfigError(
            f"{source}: at state.backend: 'redis' needs the Redis client: pip install 'frugal-proxy[redis]'"
        )
    for key in ("connect_timeout", "timeout"):
        try:
            if parse_duration(getattr(state, key)) <= 0:
                raise ValueError("must be longer than 0s")
        except ValueError as exc:
            raise ConfigError(f"{source}: at state.{key}: {exc}") from None
    if not 1 <= state.pool_size <= 1024:
        raise ConfigError(f"{source}: at state.pool_size: 1 to 1024 connections")
    if not state.prefix or any(char.isspace() for char in state.prefix):
        raise ConfigError(f"{source}: at state.prefix: a non-empty key prefix without spaces ('frugal:')")
    if isinstance(state.spill_max_bytes, bool) or not MIN_BYTES <= state.spill_max_bytes <= SPILL_SHARED_LIMIT:
        raise ConfigError(
            f"{source}: at state.spill_max_bytes: {state.spill_max_bytes!r} is not a size in bytes from "
            f"{MIN_BYTES} to {SPILL_SHARED_LIMIT} (Redis's largest value); a larger artifact stays on the "
            "replica that cut it"
        )
    if state.url:
        why = redis_url_error(state.url)
        if why is not None:
            raise ConfigError(f"{source}: at state.url: {why}")
        parts = urlsplit(state.url)
        # redis-py also reads `?password=` (and `?username=`) from the query string.
        if parts.password is not None or {"password", "username"} & set(parse_qs(parts.query)):
            raise ConfigError(
                f"{source}: at state.url: a password does not belong in the config file; "
                f"set {REDIS_PASSWORD_ENV}, or the whole URL in {REDIS_URL_ENV}"
            )
    if state.backend == "redis" and env.get(REDIS_URL_ENV):
        why = redis_url_error(env[REDIS_URL_ENV])
        if why is not None:
            raise ConfigError(f"{source}: at state.url: {REDIS_URL_ENV}: {why}")


def _check_provider(source: str, where: str, provider: ProviderConfig, upstreams: dict[str, Upstream]) -> None:
    at = f"{source}: at {where}"
    try:
        provider.price_micros  # noqa: B018 - validates the amount
        provider.daily_budget_micros  # noqa: B018 - validates the amount
        provider.timeout_seconds  # noqa: B018 - validates the duration
    except ValueError as exc:
        raise ConfigError(f"{at}: {exc}") from None
    if provider.free_quota_monthly is not None and provider.free_quota_monthly < 0:
        raise ConfigError(f"{at}.free_quota_monthly: must not be negative")
    if provider.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", provider.api_key_env):
        raise ConfigError(f"{at}.api_key_env: {provider.api_key_env!r} is not an environment variable name")
    if provider.base_url is not None:
        parts = urlsplit(provider.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{at}.base_url: expected an http:// or https:// URL with a host")
    if (provider.upstream is None) != (provider.tool is None):
        raise ConfigError(f"{at}: a provider served by an upstream MCP tool needs both 'upstream' and 'tool'")
    if provider.upstream is not None and provider.upstream not in upstreams:
        raise ConfigError(f"{at}.upstream: no [upstreams.{provider.upstream}] is configured")
    if provider.upstream is not None and provider.tool is not None:
        _check_not_hidden(f"{at}.tool", provider.upstream, provider.tool, upstreams)
    if provider.upstream is None and (provider.args or provider.results):
        raise ConfigError(f"{at}: 'args' and 'results' apply to a provider with 'upstream' and 'tool'")


def _check_not_hidden(at: str, upstream: str, tool: str, upstreams: dict[str, Upstream]) -> None:
    """A tool that its upstream's `tools` filter hides is never called, so no route may name it."""
    why = upstreams[upstream].tools.hides(tool, upstream)
    if why is not None:
        raise ConfigError(
            f"{at}: the tool {tool!r} of upstream {upstream!r} is {why}, and a hidden tool is never called; "
            "drop it here or expose it there"
        )


def _load_governor(table: Any, source: str) -> GovernorSettings:
    """`[governor]`, each `[governor.routes."TOOL"]` converted on its own so that errors name it."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: at governor: expected a table")
    rest: dict[str, Any] = dict(table)
    if isinstance(rest.get("spill_ttl"), str):
        try:
            rest["spill_ttl"] = parse_duration(rest["spill_ttl"])
        except ValueError as exc:
            raise ConfigError(f"{source}: at governor.spill_ttl: {exc}") from None
    tables = rest.pop("routes", {})
    if not isinstance(tables, dict):
        raise ConfigError(f'{source}: at governor.routes: expected a table of [governor.routes."TOOL"] tables')
    routes = {
        name: _convert(value, RouteBudget, source, f"governor.routes.{_key(name)}") for name, value in tables.items()
    }
    return msgspec.structs.replace(_convert(rest, GovernorSettings, source, "governor"), routes=routes)


def _named(tables: Any, kind: type[T], source: str, where: str) -> dict[str, T]:
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: at {where}: expected a table of [{where}.NAME] tables")
    return {name: _convert(value, kind, source, f"{where}.{_key(name)}") for name, value in tables.items()}


def _key(name: str) -> str:
    """A TOML key as the file would spell it: bare when it can be, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _load_auth(table: Any, source: str, env: dict[str, str]) -> Auth:
    """`[auth]`, each `[auth.operators.NAME]` converted on its own so that errors name it."""
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: at auth: expected a table")
    rest = dict(table)
    tables = rest.pop("operators", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: at auth.operators: expected a table of [auth.operators.NAME] tables")
    auth = _convert(rest, Auth, source, "auth")
    operators = {
        name: _convert(value, OperatorEntry, source, f"auth.operators.{name}") for name, value in tables.items()
    }
    auth = msgspec.structs.replace(auth, operators=operators)
    if auth.max_registered < 0:
        raise ConfigError(f"{source}: at auth.max_registered: must not be negative")
    try:
        configured_tokens({name: entry.token_env for name, entry in auth.operators.items()}, env)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return auth


def _convert(value: Any, kind: type[T], source: str, where: str) -> T:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {_readable(str(exc), where)}") from None


def _readable(message: str, where: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.limits.page_size`" as "at limits.page_size: expected
    int, got str", with the key path rooted where the value came from."""
    text, sep, at = message.rpartition(" - at `")
    if not sep:
        text, at = message, "$`"
    path = at.rstrip("`").removeprefix("$").lstrip(".")
    full = ".".join(part for part in (where, path) if part)
    text = text.replace("Object contains unknown field", "unknown key").replace(" | null", "")
    text = re.sub(r"Expected `([^`]*)`, got `([^`]*)`", r"expected \1, got \2", text)
    return f"at {full or 'the top level'}: {text}"


def _check_upstream(source: str, name: str, upstream: Upstream, env: dict[str, str]) -> Upstream:
    where = f"{source}: at upstreams.{name}"
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise ConfigError(f"{where}: an upstream name uses letters, digits, '-' and '_' (1-64 of them)")
    if (upstream.command is None) == (upstream.url is None):
        raise ConfigError(f"{where}: give exactly one of 'command' (a list of strings) or 'url'")
    if upstream.command is not None and not upstream.command:
        raise ConfigError(f"{where}.command: the command is empty")
    url = _expand(upstream.url, env, f"{where}.url") if upstream.url is not None else None
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{where}.url: expected an http:// or https:// URL with a host")
    elif upstream.headers:
        raise ConfigError(f"{where}.headers: headers apply to a 'url' upstream, not to a command")
    if upstream.prefix is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{0,64}", upstream.prefix):
        raise ConfigError(f"{where}.prefix: use letters, digits, '_', '-' and '.' only")
    for key in ("timeout", "connect_timeout", "read_timeout"):
        value = getattr(upstream, key)
        if value is not None:
            try:
                parse_duration(value)
            except ValueError as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
    try:
        money.to_micros(upstream.cost_per_call, "cost_per_call")
    except ValueError as exc:
        raise ConfigError(f"{where}.{exc}") from None
    expanded_env = {key: _expand(value, env, f"{where}.env.{key}") for key, value in upstream.env.items()}
    headers = {key: _expand(value, env, f"{where}.headers.{key}") for key, value in upstream.headers.items()}
    return msgspec.structs.replace(upstream, url=url, env=expanded_env, headers=headers)


def _expand(value: str, env: dict[str, str], where: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return env[name]

    return _ENV_REF.sub(substitute, value)


STARTER = """\
# frugal-proxy configuration. Every key: docs/configuration.md; the routed tools: docs/routing.md.
# Durations are Go-style strings ("90s", "2m"); ${VAR} in env, headers and url comes from
# the environment. An unknown key is an error.

# One table per upstream MCP server. With several, tools are exposed as <prefix>__<tool>
# (prefix defaults to the table's name; prefix = "" keeps the names unchanged).
[upstreams.everything]
command = ["npx", "-y", "@modelcontextprotocol/server-everything"]
tools = { deny = ["get-env"] }      # glob lists: allow = [...] and/or deny = [...]

# [upstreams.remote]                  # a remote server over Streamable HTTP (or HTTP+SSE)
# url = "https://mcp.example.com/mcp"
# headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }

# [upstreams.files]
# command = ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"]
# env = { LOG_LEVEL = "warn" }
# lazy = true                       # start on first use instead of at start-up
# share = false                     # a connection per session-era HTTP session, never shared
# timeout = "60s"                   # per-call deadline for this upstream
# cost_per_call = 0.0               # USD, for routing and the ledger

[limits]
# call_timeout = "60s"              # deadline of one call: unset, 5m for a plain tool and 60s
#                                   # over a routed tool's whole failover chain ("0s": none)

# The size governor cuts results over budget, spills the rest and signs a receipt.
# [governor]
# max_bytes = 32768                 # also max_records = 50, max_tokens = 8192
# spill_ttl = "1h"
# [governor.routes."files__read_file"]
# max_bytes = 65536

# Over HTTP (serve --http), who may call and whose spills are whose; FRUGAL_AUTH_TOKEN alone is
# the operator "default".
# [auth]
# open_registration = false         # true: POST /register mints operators and their tokens
# [auth.operators.alice]
# token_env = "ALICE_TOKEN"         # the environment variable holding alice's bearer token
"""
