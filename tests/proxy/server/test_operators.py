"""Operators without a socket: tokens kept as hashes, registration and its registry file, and the
`[auth]` table. Names: tests/proxy/test_identities.py; budgets: tests/proxy/governor/test_operator_budgets.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from frugal_proxy import config
from frugal_proxy.config import ConfigError
from frugal_proxy.identities import InvalidOperator, configured_tokens, token_hash
from frugal_proxy.server.operators import Operators, RegistrationRefused

pytestmark = pytest.mark.anyio


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
