"""serve's reading of the config into what each session needs, and `config check`'s look at
the `[state]` Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frugal_proxy import config as config_module
from frugal_proxy.cli.serve import StatusFile, config_command, plain_timeouts, status_command
from tests.conftest import refusing_port
from tests.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]


def _config(text: str) -> config_module.Config:
    return config_module.loads(text, source="test.toml")


def test_an_upstreams_own_timeout_wins_over_the_call_timeout_either_way() -> None:
    loaded = _config(
        """
        [limits]
        call_timeout = "60s"
        [upstreams.slow]
        command = ["slow-tool"]
        timeout = "10m"
        [upstreams.quick]
        command = ["quick-tool"]
        timeout = "5s"
        [upstreams.plain]
        command = ["plain-tool"]
        """
    )
    assert plain_timeouts(loaded) == {"slow": 600.0, "quick": 5.0, "plain": 60.0}


def test_with_nothing_set_a_plain_tool_waits_five_minutes_and_0s_means_no_deadline() -> None:
    assert plain_timeouts(_config('[upstreams.a]\ncommand = ["a"]\n')) == {"a": 300.0}
    off = _config(
        '[limits]\ncall_timeout = "0s"\n'
        '[upstreams.a]\ncommand = ["a"]\n'
        '[upstreams.b]\ncommand = ["b"]\ntimeout = "2s"\n'
    )
    assert plain_timeouts(off) == {"a": None, "b": 2.0}


def test_config_check_connects_to_the_state_redis_and_says_what_answered(
    tmp_path: Path, redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "frugal.toml"
    path.write_text(f'[state]\nbackend = "redis"\nurl = "{redis_server.url}"\n')
    assert config_command(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    version = redis_server.command("INFO", "server").split("redis_version:")[1].split()[0]
    assert f"state: redis at {redis_server.url}: Redis {version}, round trip " in out
    assert "keys under 'frugal:'" in out


def test_config_check_says_why_the_state_redis_did_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "frugal.toml"
    path.write_text('[state]\nbackend = "redis"\nconnect_timeout = "2s"\n')
    with refusing_port() as port:
        monkeypatch.setenv("FRUGAL_REDIS_URL", f"redis://:hunter2@127.0.0.1:{port}/0")
        assert config_command(["check", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"config error: state: redis at redis://127.0.0.1:{port}/0 did not answer (" in err
    assert "check [state] url (or FRUGAL_REDIS_URL) and that the server runs" in err
    assert "hunter2" not in err


def test_status_says_when_the_shared_state_is_degraded(capsys: pytest.CaptureFixture[str]) -> None:
    status = StatusFile([])
    status.state = lambda: "degraded"
    status.path.parent.mkdir(parents=True, exist_ok=True)
    status.path.write_text(json.dumps(status.snapshot()))
    try:
        assert status_command([]) == 0
    finally:
        status.remove()
    assert "  state: degraded (redis)\n" in capsys.readouterr().out
    assert "state" not in StatusFile([]).snapshot()  # the memory backend: nothing to say
