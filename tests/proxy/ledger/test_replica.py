"""Which replica a process is: an id checked for what a file name can hold, from the flag or
$FRUGAL_REPLICA_ID, else the host name with a short hash of the machine id."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from frugal_proxy.ledger import replica


@pytest.mark.parametrize("value", ["replica-1", "a", "web_2", "A" * 64])
def test_a_good_id_is_kept(value: str) -> None:
    assert replica.check(value) == value


@pytest.mark.parametrize("value", ["", "a/b", "-lead", "two.parts", "a b", "A" * 65, "ü"])
def test_a_bad_id_says_what_to_write(value: str) -> None:
    with pytest.raises(ValueError, match=r"is not a replica id: write 1 to 64 letters, digits.*e\.g\. replica-1"):
        replica.check(value)


def test_the_default_is_the_host_name_and_a_hash_of_the_machine_id(tmp_path: Path) -> None:
    machine = tmp_path / "machine-id"
    machine.write_text("3d1219c7aa\n")
    made = replica.default_id("web.example.com", machine)
    assert made.startswith("web-example-com-") and len(made) == len("web-example-com-") + 6
    assert replica.default_id("web.example.com", machine) == made  # stable
    machine.write_text("another machine\n")
    assert replica.default_id("web.example.com", machine) != made  # the same host name elsewhere
    assert replica.default_id("web.example.com", tmp_path / "none") == "web-example-com"  # a container
    assert replica.check(replica.default_id("..", tmp_path / "none")) == "host"
    assert replica.check(replica.default_id("x" * 200, machine))


def test_the_environment_names_it_and_a_bad_value_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert replica.replica_id({"FRUGAL_REPLICA_ID": " replica-2 "}) == "replica-2"
    assert replica.configured({}) is None
    with pytest.raises(ValueError, match="FRUGAL_REPLICA_ID 'no/way' is not a replica id"):
        replica.configured({"FRUGAL_REPLICA_ID": "no/way"})
    with caplog.at_level(logging.WARNING, "frugal_proxy.ledger"):
        assert replica.replica_id({"FRUGAL_REPLICA_ID": "no/way"}) == replica.default_id()
    assert "FRUGAL_REPLICA_ID 'no/way' is not a replica id" in caplog.text
