"""requestState tokens minted by the proxy cannot be read usefully, forged or edited."""

from __future__ import annotations

import time

import pytest

from frugal_proxy.protocol.request_state import InvalidRequestState, RequestStateSealer, StateClaims


def claims(expires_in: float = 60) -> StateClaims:
    return StateClaims("hold-1", ("createMessage-1",), time.time() + expires_in)


def test_round_trip() -> None:
    sealer = RequestStateSealer()
    assert sealer.open(sealer.seal(claims())).hold_id == "hold-1"


def test_every_single_character_edit_is_rejected() -> None:
    sealer = RequestStateSealer()
    token = sealer.seal(claims())
    for position in range(len("frugal1."), len(token)):
        replacement = "A" if token[position] != "A" else "B"
        edited = token[:position] + replacement + token[position + 1 :]
        with pytest.raises(InvalidRequestState):
            sealer.open(edited)


def test_another_key_and_foreign_tokens_are_rejected() -> None:
    token = RequestStateSealer().seal(claims())
    with pytest.raises(InvalidRequestState, match="altered"):
        RequestStateSealer().open(token)
    with pytest.raises(InvalidRequestState, match="not issued"):
        RequestStateSealer().open("upstream-state-xyz")


def test_expired_token_is_rejected() -> None:
    sealer = RequestStateSealer()
    with pytest.raises(InvalidRequestState, match="expired"):
        sealer.open(sealer.seal(claims(expires_in=-1)))
