"""serve's reading of the config into what each session needs."""

from __future__ import annotations

from frugal_proxy import config as config_module
from frugal_proxy.cli.serve import plain_timeouts


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
