"""Operators without a socket: canonical names, tokens kept as hashes, registration and its
registry file, the `[auth]` table, and each operator's own (tighter) budgets."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frugal_proxy import config
from frugal_proxy.config import ConfigError, GovernorSettings, RouteBudget
from frugal_proxy.governor.operator_budgets import BudgetError, OperatorBudgets
from frugal_proxy.identities import InvalidOperator, canonical, configured_tokens, token_hash
from frugal_proxy.server.operators import Operators, RegistrationRefused

pytestmark = pytest.mark.anyio


# -- canonical names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variant",
    [
        "alice",
        "Alice",
        "ALICE",
        "\uff21\uff2c\uff29\uff23\uff25",  # full-width ALICE
        "al\u200bice",  # zero-width space (a format character)
        "\u200dal\u00adi\ufeffce\u2060",  # joiner, soft hyphen, BOM, word joiner
        " alice ",
        "\talice\n",
        "\u3000alice\u00a0",  # ideographic and no-break spaces
        "\U0001d41a\U0001d425\U0001d422\U0001d41c\U0001d41e",  # mathematical bold alice
    ],
)
def test_variants_of_a_name_are_one_operator(variant: str) -> None:
    assert canonical(variant) == "alice"


def test_canonical_names_keep_what_tells_them_apart() -> None:
    assert canonical("Team  Blue\u3000 Ops") == "team blue ops"
    assert canonical("Stra\u00dfe") == canonical("STRASSE") == "strasse"
    assert canonical("\u212bngstr\u00f6m") == canonical("\u00c5ngstro\u0308m")  # Angstrom sign, combining mark
    assert canonical("alice") != canonical("alice2") != canonical("al ice")


@pytest.mark.parametrize("bad", ["", "   ", "\u200b\u200d", "a" * 65, "ali\x00ce", "bob\x1b[31m", "\ue000x"])
def test_unusable_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidOperator):
        canonical(bad)


@given(st.text(max_size=40))
def test_canonical_is_idempotent(name: str) -> None:
    try:
        once = canonical(name)
    except InvalidOperator:
        return
    assert canonical(once) == once


# -- tokens and registration -------------------------------------------------------------------------


async def test_configured_tokens_identify_their_operator(tmp_path: Path) -> None:
    operators = Operators(
        configured_tokens({"Alice": "A", "bob": "B"}, {"A": "tok-a", "B": "tok-b", "FRUGAL_AUTH_TOKEN": "tok-d"}),
        path=tmp_path / "operators.json",
    )
    assert operators.required
    assert await operators.identify("Bearer tok-a") == "alice"
    assert await operators.identify("bearer   tok-b ") == "bob"
    assert await operators.identify("Bearer tok-d") == "default"
    for header in ("", "Bearer", "Bearer ", "Basic tok-a", "Bearer tok-a2", "tok-a"):
        assert await operators.identify(header) is None


async def test_registration_mints_a_token_kept_only_as_a_hash(tmp_path: Path) -> None:
    path = tmp_path / "auth" / "operators.json"
    operators = Operators(open_registration=True, path=path)
    operator, token = await operators.register(" Carol\u200b ")
    assert operator == "carol" and len(token) >= 40
    assert await operators.identify(f"Bearer {token}") == "carol"
    stored = path.read_text()
    assert token not in stored
    assert json.loads(stored)["operators"]["carol"]["token_sha256"] == token_hash(token)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for variant in ("carol", "CAROL", "\uff23\uff21\uff32\uff2f\uff2c", "car\u200bol", "  carol"):
        with pytest.raises(RegistrationRefused) as refused:
            await operators.register(variant)
        assert (refused.value.code, refused.value.operator) == ("operator_exists", "carol")
    # A restart (a new registry read from the same file) keeps the operator and its token.
    again = Operators(path=path)
    assert again.required and await again.identify(f"Bearer {token}") == "carol"
    # Removing the registry (say, to reset a lost token) locks everyone out; it never turns
    # authentication off for a proxy that needed it.
    path.unlink()
    assert await again.identify("Bearer not-a-token") is None  # an unknown token rereads the file
    assert await again.identify(f"Bearer {token}") is None
    assert again.required


def test_a_huge_name_is_refused_before_any_per_character_work() -> None:
    with pytest.raises(InvalidOperator):
        canonical("a" * 4_000_000)


async def test_registration_refusals(tmp_path: Path) -> None:
    closed = Operators(path=tmp_path / "closed.json")
    with pytest.raises(RegistrationRefused) as refused:
        await closed.register("dave")
    assert refused.value.code == "registration_closed"
    assert not (tmp_path / "closed.json").exists()
    configured = configured_tokens({"Erin": "E"}, {"E": "tok-e"})
    operators = Operators(configured, open_registration=True, max_registered=1, path=tmp_path / "o.json")
    for taken in ("ERIN", "local", "Default"):
        with pytest.raises(RegistrationRefused) as refused:
            await operators.register(taken)
        assert refused.value.code == "operator_exists"
    with pytest.raises(InvalidOperator):
        await operators.register("\u200b")
    await operators.register("frank")
    with pytest.raises(RegistrationRefused) as refused:
        await operators.register("grace")
    assert refused.value.code == "registration_full"


async def test_another_process_registering_or_removing_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "operators.json"
    here = Operators(open_registration=True, path=path)
    there = Operators(open_registration=True, path=path)
    _, token = await there.register("heidi")
    assert await here.identify(f"Bearer {token}") == "heidi"  # an unknown token rereads the file
    with pytest.raises(RegistrationRefused):
        await here.register("HEIDI")
    path.write_text('{"operators": {}}\n')
    os.utime(path, ns=(1, 1))  # a different mtime, whatever the file system's resolution
    here._checked = 0.0  # the once-a-second recheck is due
    assert await here.identify(f"Bearer {token}") is None


def test_a_registry_file_that_clashes_with_the_config_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "operators.json"
    path.write_text(json.dumps({"operators": {"ivan": {"token_sha256": "0" * 64, "registered_at": "x"}}}))
    with pytest.raises(ValueError, match="'ivan' is both configured"):
        Operators(configured_tokens({"Ivan": "I"}, {"I": "tok"}), path=path)
    path.write_text("not json")
    with pytest.raises(ValueError, match="cannot read the registered operators"):
        Operators(path=path)


# -- the [auth] table -----------------------------------------------------------------------------------

UPSTREAM = '[upstreams.notes]\ncommand = ["x"]\n'


@pytest.mark.parametrize(
    ("table", "environ", "expected"),
    [
        ("[auth]\nopen_registraton = true\n", {}, "at auth: unknown key `open_registraton`"),
        ("[auth]\nopen_registration = 'yes'\n", {}, "at auth.open_registration: expected bool, got str"),
        ("[auth]\nmax_registered = -1\n", {}, "at auth.max_registered: must not be negative"),
        ("[auth.operators.alice]\ntoken_env = 5\n", {}, "at auth.operators.alice.token_env: expected str, got int"),
        ("[auth.operators.alice]\ntoken = 'x'\n", {}, "at auth.operators.alice: unknown key `token`"),
        ("[auth.operators.alice]\n", {}, "at auth.operators.alice: Object missing required field `token_env`"),
        (
            "[auth.operators.alice]\ntoken_env = 'ALICE_TOKEN'\n",
            {},
            "at auth.operators.alice.token_env: environment variable ALICE_TOKEN is not set",
        ),
        (
            "[auth.operators.alice]\ntoken_env = 'ALICE TOKEN'\n",
            {},
            "at auth.operators.alice.token_env: 'ALICE TOKEN' is not an environment variable name",
        ),
        (
            "[auth.operators.Alice]\ntoken_env = 'A'\n[auth.operators.\"\uff21lice\"]\ntoken_env = 'B'\n",
            {"A": "1", "B": "2"},
            "the same operator as auth.operators.Alice (both are 'alice')",
        ),
        (
            "[auth.operators.alice]\ntoken_env = 'A'\n[auth.operators.bob]\ntoken_env = 'B'\n",
            {"A": "same", "B": "same"},
            "at auth.operators.bob: its token is the same as auth.operators.alice's",
        ),
        ("[auth.operators.Local]\ntoken_env = 'A'\n", {"A": "1"}, "at auth.operators.Local: 'local' is reserved"),
        ("[auth.operators.\"\u200b\"]\ntoken_env = 'A'\n", {"A": "1"}, "at auth.operators.\u200b: an operator name"),
    ],
)
def test_a_bad_auth_table_names_the_key_path(table: str, environ: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        config.loads(UPSTREAM + table, "frugal.toml", environ)
    assert str(error.value).startswith("frugal.toml: ")
    assert expected in str(error.value)


def test_a_good_auth_table_loads() -> None:
    table = "[auth]\nopen_registration = true\n[auth.operators.alice]\ntoken_env = 'A'\n"
    loaded = config.loads(UPSTREAM + table, "frugal.toml", {"A": "tok"})
    assert loaded.auth.open_registration and loaded.auth.operators["alice"].token_env == "A"
    assert config.loads(UPSTREAM, "frugal.toml", {}).auth == config.Auth()


# -- each operator's own budgets ------------------------------------------------------------------------


def test_operators_can_lower_their_budgets_but_not_raise_them() -> None:
    settings = GovernorSettings(routes={"files__read": RouteBudget(max_bytes=4096)})
    budgets = OperatorBudgets(settings)
    budgets.update("alice", {"default": {"max_records": 10}, "routes": {"files__read": {"max_bytes": 2048}}})
    assert budgets.budget("alice", "files__read").max_bytes == 2048
    assert budgets.budget("alice", "other").max_records == 10
    assert budgets.budget("bob", "other").max_records == 50  # another operator keeps the configured ones
    # The configured per-route ceiling holds under an operator's larger default.
    budgets.update("alice", {"default": {"max_bytes": 16384}})
    assert budgets.budget("alice", "files__read").max_bytes == 2048
    budgets.update("alice", {"routes": {"files__read": None}})
    assert budgets.budget("alice", "files__read").max_bytes == 4096
    report = budgets.report("alice")
    assert report["default"]["max_bytes"] == 16384 and report["routes"]["files__read"]["max_bytes"] == 4096
    assert report["overrides"] == {"default": {"max_bytes": 16384}, "routes": {}}
    budgets.update("alice", {"default": None})
    assert budgets.report("alice")["overrides"] == {"default": {}, "routes": {}}


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({"default": {"max_bytes": 65536}}, "budget_above_limit", "at default.max_bytes: 65536 is above"),
        ({"routes": {"files__read": {"max_bytes": 8192}}}, "budget_above_limit", "routes.files__read.max_bytes"),
        ({"routes": {"x": {"max_bytes": "big"}}}, "invalid_budgets", "at routes.x: Expected `int | null`"),
        ({"routes": {"x": {"max_records": 0}}}, "invalid_budgets", "max_records must be at least 1"),
        ({"routes": {"x": {"max_rows": 5}}}, "invalid_budgets", "unknown field `max_rows`"),
        ({"routes": {"x": {"mode": "pages"}}}, "invalid_budgets", "at routes.x"),
        ({"routes": ["x"]}, "invalid_budgets", "routes must be an object"),
        ({"routes": {"": {}}}, "invalid_budgets", "a route name has 1 to 256 characters"),
        ({"limits": {}}, "invalid_budgets", "send {"),
        ({}, "invalid_budgets", "send {"),
        ([], "invalid_budgets", "send {"),
    ],
)
def test_bad_budget_changes_are_refused_whole(body: object, code: str, message: str) -> None:
    budgets = OperatorBudgets(GovernorSettings(routes={"files__read": RouteBudget(max_bytes=4096)}))
    budgets.update("alice", {"default": {"max_records": 5}})
    with pytest.raises(BudgetError) as refused:
        budgets.update("alice", body)
    assert refused.value.code == code and message in str(refused.value)
    assert budgets.report("alice")["overrides"] == {"default": {"max_records": 5}, "routes": {}}
