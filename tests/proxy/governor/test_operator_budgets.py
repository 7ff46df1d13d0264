"""Each operator's own budgets: lowered, never raised above the configured ones, refused whole."""

from __future__ import annotations

import pytest

from frugal_proxy.config import GovernorSettings, RouteBudget
from frugal_proxy.governor.operator_budgets import BudgetError, OperatorBudgets


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


def test_a_budget_names_a_route_when_configured_or_an_operators_own() -> None:
    budgets = OperatorBudgets(GovernorSettings(routes={"files__read": RouteBudget(max_bytes=4096)}))
    assert budgets.names_route("bob", "files__read") and not budgets.names_route("bob", "frugal__search")
    budgets.update("alice", {"default": {"max_records": 10}})
    assert not budgets.names_route("alice", "frugal__search")  # a default is not the route's own
    budgets.update("alice", {"routes": {"frugal__search": {"max_records": 3}}})
    assert budgets.names_route("alice", "frugal__search") and not budgets.names_route("bob", "frugal__search")
