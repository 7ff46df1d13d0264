"""The config file: typed, expanded, and every error names the key path and the reason."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from frugal_proxy import config
from frugal_proxy.config import ConfigError, RouteBudget, loads


def test_a_full_config_loads_with_defaults_and_expansion() -> None:
    loaded = config.loads(
        """
        [upstreams.files]
        command = ["npx", "-y", "server-filesystem", "/data"]
        env = { TOKEN = "${SECRET}", PLAIN = "x" }
        timeout = "1m30s"
        cost_per_call = 0.002
        tools = { allow = ["read_*"], deny = ["read_secret"] }

        [limits]
        call_timeout = "90s"
        """,
        environ={"SECRET": "s3"},
    )
    files = loaded.upstreams["files"]
    assert files.env == {"TOKEN": "s3", "PLAIN": "x"}
    assert files.timeout_seconds == 90.0
    assert files.tools.allow == ["read_*"] and files.lazy is False and files.prefix is None
    assert loaded.limits.call_timeout_seconds == 90.0
    assert files.price_micros == 2_000  # read as a decimal: exact, never a binary float


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[upstreams.a]\ncommand = ["x"]\ncomand = ["y"]', "at upstreams.a: unknown key `comand`"),
        ('[upstreams.a]\ncommand = "x y"', "at upstreams.a.command: expected array, got str"),
        ('[upstreams.a]\ncommand = ["x"]\ntimeout = "soon"', "upstreams.a.timeout: 'soon' is not a duration"),
        ('[limits]\ncall_timeout = "5 minutes"', "limits.call_timeout: '5 minutes' is not a duration"),
        (
            '[upstreams.a]\ncommand = ["x"]\nenv = { K = "${NOPE_NOT_SET}" }',
            "upstreams.a.env.K: environment variable NOPE_NOT_SET is not set",
        ),
        ("[upstreams.a]\nenv = {}", "give exactly one of 'command'"),
        ('[upstreams.a]\nurl = "ftp://example.invalid/mcp"', "upstreams.a.url: expected an http:// or https:// URL"),
        ('[upstreams."a b"]\ncommand = ["x"]', "an upstream name uses letters"),
        (
            '[upstreams.a]\ncommand = ["x"]\ncost_per_call = -1.0',
            "cost_per_call: must be a finite amount of at least $0",
        ),
        ('[upstreams.a]\ncommand = ["x"]\ncost_per_call = 0.0000001', "finer than a micro-dollar"),
        ("[nonsense]\nstrategy = 'cheap'", "at the top level: unknown key `nonsense`"),
        ("[upstreams.a\ncommand = 1", "not valid TOML"),
    ],
)
def test_errors_name_the_key_path_and_the_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config.loads(text, "frugal.toml", environ={})
    assert str(caught.value).startswith("frugal.toml: ")
    assert message in str(caught.value)


def test_durations() -> None:
    assert config.parse_duration("250ms") == 0.25
    assert config.parse_duration("2m") == 120
    assert config.parse_duration("1h30m") == 5400
    assert config.parse_duration("0") == 0  # Go reads a bare 0 as a duration, and only 0
    for bad in ("", "10", "1d", "m5", "5m "):
        with pytest.raises(ValueError):
            config.parse_duration(bad)


def test_where_the_file_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRUGAL_CONFIG", raising=False)
    monkeypatch.setenv("FRUGAL_HOME", str(tmp_path))
    assert config.config_path() == tmp_path / "config" / "frugal.toml"
    monkeypatch.setenv("FRUGAL_CONFIG", "/etc/frugal.toml")
    assert config.config_path() == Path("/etc/frugal.toml")
    assert config.config_path("mine.toml") == Path("mine.toml")
    with pytest.raises(ConfigError, match="no such config file"):
        config.load(tmp_path / "missing.toml")


def test_the_starter_file_is_a_valid_config() -> None:
    starter = config.loads(config.STARTER, environ={})
    assert list(starter.upstreams) == ["everything"]
    assert starter.upstreams["everything"].tools.deny == ["get-env"]


def test_the_governor_table_is_checked_at_load_time() -> None:
    loaded = config.loads(
        '[governor]\nmax_bytes = 4096\nspill_ttl = "30m"\n[governor.routes."files__read_file"]\nmax_records = 5\n',
        environ={},
    )
    assert loaded.governor.spill_ttl == 1800.0
    assert loaded.governor.routes == {"files__read_file": RouteBudget(max_records=5)}
    assert loaded.governor.budget("files__read_file").max_records == 5
    assert loaded.governor.budget("other").max_bytes == 4096
    for text, message in [
        ("[governor]\nmax_bytes = 10", "at governor: max_bytes must be at least 1024"),
        ('[governor]\nspill_ttl = "2h"', "at governor: spill_ttl must be"),
        ('[governor]\nspill_ttl = "soon"', "at governor.spill_ttl: 'soon' is not a duration"),
        ("[governor]\nmax_byte = 4096", "unknown key `max_byte`"),
        # Each route's table is checked on its own, so an error names the route as the file does.
        ('[governor.routes."files__read_file"]\nmax_bytes = 10', "at governor.routes.files__read_file: max_bytes must"),
        ('[governor.routes."a.b"]\nmax_records = 0', 'at governor.routes."a.b": max_records must be at least 1'),
        ('[governor.routes."x"]\nmax_recrods = 5', "at governor.routes.x: unknown key `max_recrods`"),
        ("[governor]\nroutes = 3", "at governor.routes: expected a table"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            config.loads(text, environ={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[search_providers.serper]\ncost_per_call = "cheap"', "search_providers.serper.cost_per_call"),
        ("[search_providers.serper]\ncost_per_call = -0.1", "at search_providers.serper: cost_per_call: must be"),
        ("[search_providers.serper]\ndaily_budget_usd = 1e22", "daily_budget_usd: at most $1,000,000,000"),
        ("[search_providers.serper]\ncost_per_call = 1e400", "cost_per_call: at most $1,000,000,000"),
        ('[search_providers.serper]\nbase_url = "ftp://x"', "search_providers.serper.base_url: expected an http"),
        ('[search_providers.serper]\napi_key_env = "not a var"', "api_key_env: 'not a var' is not an environment"),
        ('[search_providers.t]\nupstream = "nope"\ntool = "x"', "search_providers.t.upstream: no [upstreams.nope]"),
        ('[search_providers.t]\ntool = "x"', "needs both 'upstream' and 'tool'"),
        ('[search_providers.serper]\nargs = { q = "{query}" }', "'args' and 'results' apply to a provider with"),
        ('[search_providers.serper]\ncolour = "red"', "at search_providers.serper: unknown key `colour`"),
        ('[routing.search]\nstrategy = "random"', "at routing.search.strategy"),
    ],
)
def test_provider_and_routing_tables_are_checked_at_load_time(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.loads(text, environ={})


def test_provider_tables_read_prices_exactly() -> None:
    loaded = config.loads(
        '[search_providers.serper]\ncost_per_call = 0.001\ntimeout = "30s"\n[routing.search]\norder = ["serper"]\n',
        environ={},
    )
    serper = loaded.search_providers["serper"]
    assert serper.price_micros == 1_000 and serper.timeout_seconds == 30.0
    assert loaded.routing.search.order == ["serper"] and loaded.routing.extract.strategy == "cheap"


def test_durations_are_written_back_as_go_does_rounded_up() -> None:
    assert [config.format_duration(s) for s in (0, 0.0004, 0.2, 0.9999, 5, 47.1, 60, 90, 3723)] == [
        "0s",
        "1ms",
        "200ms",
        "1s",
        "5s",
        "48s",
        "1m0s",
        "1m30s",
        "1h2m3s",
    ]


def test_a_cooldown_that_is_not_a_duration_is_not_fatal() -> None:
    assert config.loads('[routing]\ncooldown = "2m"').routing.cooldown_seconds == 120.0
    assert config.loads("").routing.cooldown_seconds == 60.0
    assert config.loads('[routing]\ncooldown = "a while"').routing.cooldown_seconds is None


def test_a_daily_budget_is_exact_and_checked() -> None:
    loaded = config.loads("[search_providers.serper]\ndaily_budget_usd = 0.25")
    assert loaded.search_providers["serper"].daily_budget_micros == 250_000
    with pytest.raises(ConfigError, match=r"at search_providers.serper: daily_budget_usd: must be a finite amount"):
        config.loads("[search_providers.serper]\ndaily_budget_usd = -1.0")


def test_call_timeout_unset_is_5m_for_plain_tools_and_60s_for_routed_ones() -> None:
    unset = config.loads("").limits
    assert (unset.call_timeout_seconds, unset.routed_timeout_seconds) == (300.0, 60.0)
    both = config.loads('[limits]\ncall_timeout = "90s"').limits
    assert (both.call_timeout_seconds, both.routed_timeout_seconds) == (90.0, 90.0)
    assert config.loads('[limits]\ncall_timeout = "0s"').limits.routed_timeout_seconds is None


def test_retries_are_0_to_5() -> None:
    assert config.loads("").limits.retries == 2
    assert config.loads("[limits]\nretries = 0").limits.retries == 0
    with pytest.raises(ConfigError, match=r"at limits.retries: 0 to 5 \(0 turns retries off\)"):
        config.loads("[limits]\nretries = 6")


def test_limits_root_sets_bounds_the_connections_per_upstream() -> None:
    assert config.loads("").limits.root_sets == 16
    assert config.loads("[limits]\nroot_sets = 2").limits.root_sets == 2
    with pytest.raises(ConfigError, match=r"at limits.root_sets: must be at least 1"):
        config.loads("[limits]\nroot_sets = 0")


def test_the_loop_guard_settings_are_checked() -> None:
    loaded = config.loads("")
    assert (loaded.routing.loop_limit, loaded.routing.loop_window_seconds) == (5, 60.0)
    with pytest.raises(ConfigError, match=r"at routing\.loop_limit: must not be negative"):
        config.loads("[routing]\nloop_limit = -1")
    with pytest.raises(ConfigError, match=r"at routing\.loop_window: 'soon' is not a duration"):
        config.loads('[routing]\nloop_window = "soon"')
    with pytest.raises(ConfigError, match=r"at routing\.loop_window: must be longer than 0s"):
        config.loads('[routing]\nloop_window = "0s"')


def test_domain_rules_are_checked_at_load() -> None:
    loaded = config.loads('[routing.domains]\ndeny = ["ads.example"]\ndeny_private = true')
    assert loaded.routing.domains.rules.deny == ("ads.example",) and loaded.routing.domains.rules.active
    assert not config.loads("").routing.domains.rules.active
    with pytest.raises(ConfigError, match=r"at routing\.domains\.allow\[1\]: 'https://b\.example': a rule is a bare"):
        config.loads('[routing.domains]\nallow = ["a.example", "https://b.example"]')


def test_the_cache_is_off_by_default_and_its_ttls_are_checked() -> None:
    settings = config.loads("").cache
    assert settings.enabled is False and settings.max_entries == 512
    assert (settings.ttl("search"), settings.ttl("extract"), settings.ttl("browse")) == (300.0, 900.0, None)
    with pytest.raises(ConfigError, match=r"at cache\.search_ttl: 'later' is not a duration"):
        config.loads('[cache]\nsearch_ttl = "later"')
    with pytest.raises(ConfigError, match=r"at cache\.max_entries: must be at least 1"):
        config.loads("[cache]\nmax_entries = 0")


ROUTE_UPSTREAMS = '[upstreams.a]\ncommand = ["a"]\n[upstreams.b-eu]\ncommand = ["b"]\n'


def test_a_tool_route_names_its_candidates_as_upstream_dot_tool() -> None:
    loaded = config.loads(
        ROUTE_UPSTREAMS + '[routes.search]\ncandidates = ["a.web.search", "b-eu.search"]\nstrategy = "fast"\n',
        environ={},
    )
    route = loaded.routes["search"]
    assert [config.split_candidate(c, loaded.upstreams) for c in route.candidates] == [
        ("a", "web.search"),  # a tool name may hold a dot; an upstream name may not
        ("b-eu", "search"),
    ]
    assert route.routing == config.CapabilityRouting("fast", [], [])


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("[routes.search]\n", "at routes.search.candidates: name the tools that serve it"),
        ('[routes.search]\ncandidates = ["c.search"]', "routes.search.candidates[0]: 'c.search' is not UPSTREAM.TOOL"),
        (
            '[routes.search]\ncandidates = ["a"]',
            "'a' is not UPSTREAM.TOOL of a configured upstream (upstreams: a, b-eu)",
        ),
        ('[routes.search]\ncandidates = ["a.s", "a.s"]', "at routes.search.candidates: a candidate is named twice"),
        ('[routes.search]\ncandidates = ["a.s"]\norder = ["b-eu.s"]', "routes.search.order: 'b-eu.s' is not one"),
        (
            '[routes.search]\ncandidates = ["a.s", "b-eu.s"]\ndeny = ["b-ue.s"]',
            "at routes.search.deny: 'b-ue.s' is not one of its candidates (did you mean 'b-eu.s'?); "
            "candidates: a.s, b-eu.s",
        ),
        ('[routes."no way"]\ncandidates = ["a.s"]', "at routes.\"no way\": 'no way' is not a tool name"),
        ('[routes.frugal__x]\ncandidates = ["a.s"]', "not starting with frugal__"),
        ('[routes.search]\ncandidates = ["a.s"]\ncolour = 1', "at routes.search: unknown key `colour`"),
    ],
)
def test_a_bad_tool_route_fails_the_load_naming_it(route: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.loads(ROUTE_UPSTREAMS + route, environ={})


def test_the_state_backend_is_memory_unless_redis_is_asked_for() -> None:
    assert loads("").state.backend == "memory"
    state = loads('[state]\nbackend = "redis"\nurl = "unix:///run/redis.sock"\nprefix = "a:"\npool_size = 4').state
    assert (state.backend, state.prefix, state.pool_size, state.timeout_seconds) == ("redis", "a:", 4, 0.5)
    assert state.spill_max_bytes == 64 * 1024 * 1024
    assert loads("[state]\nspill_max_bytes = 1048576").state.spill_max_bytes == 1 << 20
    assert state.redis_url({}) == ("unix:///run/redis.sock", None)
    from_env = {"FRUGAL_REDIS_URL": "rediss://:secret@cache:6380/1", "FRUGAL_REDIS_PASSWORD": "other"}
    assert state.redis_url(from_env) == ("rediss://:secret@cache:6380/1", "other")
    assert loads('[state]\nbackend = "redis"').state.redis_url({}) == ("redis://127.0.0.1:6379/0", None)


def test_the_redis_backend_without_its_client_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # as if the redis extra were not installed
    with pytest.raises(ConfigError, match=re.escape("at state.backend: 'redis' needs the Redis client: pip install")):
        loads('[state]\nbackend = "redis"')


@pytest.mark.parametrize(
    ("table", "environ", "message"),
    [
        ('backend = "etcd"', {}, "at state.backend: 'etcd' is not a backend; use 'memory' (this process) or 'redis'"),
        ('url = "http://cache:6379"', {}, "at state.url: 'http' is not a Redis URL scheme"),
        (
            'url = "redis://:hunter2@cache:6379"',
            {},
            "at state.url: a password does not belong in the config file; set FRUGAL_REDIS_PASSWORD",
        ),
        (
            'url = "redis://cache:6379/0?password=hunter2"',
            {},
            "at state.url: a password does not belong in the config file; set FRUGAL_REDIS_PASSWORD",
        ),
        ('url = "unix://"', {}, "at state.url: a unix:// URL needs the socket's path"),
        (
            'backend = "redis"',
            {"FRUGAL_REDIS_URL": "cache:6379"},
            "at state.url: FRUGAL_REDIS_URL: 'cache:6379' is not",
        ),
        ('timeout = "0s"', {}, "at state.timeout: must be longer than 0s"),
        ('connect_timeout = "soon"', {}, "at state.connect_timeout: 'soon' is not a duration"),
        ("pool_size = 0", {}, "at state.pool_size: 1 to 1024"),
        ('prefix = ""', {}, "at state.prefix: a non-empty key prefix"),
        ("spill_max_bytes = 100", {}, "at state.spill_max_bytes: 100 is not a size in bytes from 1024 to"),
        ("spill_max_bytes = 1073741824", {}, "at state.spill_max_bytes: 1073741824 is not a size in bytes"),
        ("spill = 1", {}, "at state: unknown key `spill`"),
    ],
)
def test_a_bad_state_table_fails_the_load_naming_the_key(table: str, environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        loads(f"[state]\n{table}", environ=environ)
    assert "hunter2" not in str(raised.value)


def test_a_tool_filter_says_which_key_hides_a_tool() -> None:
    rules = config.ToolFilter(allow=["get-*", "echo"], deny=["get-env", "get-secret*"])
    assert rules.hides("echo", "everything") is None
    assert rules.hides("get-env", "everything") == "denied by upstreams.everything.tools.deny ('get-env')"
    assert rules.hides("get-secrets", "ev") == "denied by upstreams.ev.tools.deny ('get-secret*')"
    assert rules.hides("blob", "notes") == "not matched by upstreams.notes.tools.allow"
    assert config.ToolFilter().hides("anything", "x") is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            '[routes.search]\ncandidates = ["b-eu.search", "a.get-env"]',
            "at routes.search.candidates[1]: the tool 'get-env' of upstream 'a' is denied by "
            "upstreams.a.tools.deny ('get-*')",
        ),
        (
            '[search_providers.mine]\nupstream = "a"\ntool = "get-env"',
            "at search_providers.mine.tool: the tool 'get-env' of upstream 'a' is denied by upstreams.a.tools.deny",
        ),
    ],
)
def test_a_route_or_provider_may_not_name_a_hidden_tool(table: str, message: str) -> None:
    hiding = ROUTE_UPSTREAMS.replace("[upstreams.a]\n", '[upstreams.a]\ntools = { deny = ["get-*"] }\n')
    assert hiding != ROUTE_UPSTREAMS
    with pytest.raises(ConfigError, match=re.escape(message)):
        config.loads(hiding + table, environ={})
