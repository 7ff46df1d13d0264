"""Each operator's own governor budgets: tighter than the configured ones, never looser.

The configured budgets (`[governor]` and `[governor.routes."TOOL"]`) are a ceiling set by whoever
runs the proxy. An operator (over HTTP: `POST /budgets`) may lower them for itself, as a default
and per route, and may pick a shaping mode; a value above the configured one is refused. The
overrides live in this process's memory; with a `shared` store (the Redis backend's
state.redis_budgets) they are saved there first and every replica's copy follows it.

    OperatorBudgets     the overrides, and the budget they make for (operator, route)
    SharedBudgets       where a fleet keeps them
    BudgetError         a request to change them that cannot be used (code, message)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from frugal_proxy.config import Budget, GovernorSettings, RouteBudget

LIMITS = ("max_bytes", "max_records", "max_tokens")
MAX_ROUTES = 1000
MAX_ROUTE_CHARS = 256
MAX_CEILINGS = 4096  # configured budgets kept made, by route name (a name past it is made each call)

log = logging.getLogger("frugal_proxy.governor")


class SharedBudgets(Protocol):
    def follow(
        self, changed: Callable[[str, bytes | None], None], replaced: Callable[[dict[str, bytes]], None]
    ) -> None:
        """Hand each operator's change (its encoded overrides, None: removed), and every value
        again after a reconnect, to this process's copy."""

    async def save(self, operator: str, value: bytes | None) -> bool:
        """Keep one operator's overrides for the whole fleet; False when that could not be done."""


class BudgetError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Own(msgspec.Struct):
    default: RouteBudget = msgspec.field(default_factory=RouteBudget)
    routes: dict[str, RouteBudget] = msgspec.field(default_factory=dict)


_own_json = msgspec.json.Decoder(_Own)


class OperatorBudgets:
    def __init__(self, settings: GovernorSettings, shared: SharedBudgets | None = None) -> None:
        self.settings = settings
        self.shared = shared
        self._own: dict[str, _Own] = {}
        # Each route's configured budget, made once: the settings do not change while they serve.
        self._ceilings: dict[str, Budget] = {}
        if shared is not None:
            shared.follow(self._followed, self._replaced)

    def budget(self, operator: str, route: str) -> Budget:
        """The budget of one route for one operator: its own values, capped by the configured ones."""
        ceiling = self._ceilings.get(route)
        if ceiling is None:
            ceiling = self.settings.budget(route)
            if len(self._ceilings) < MAX_CEILINGS:
                self._ceilings[route] = ceiling
        own = self._own.get(operator)
        if own is None:
            return ceiling
        layers = (own.routes.get(route, RouteBudget()), own.default)
        values: dict[str, Any] = {}
        for name in LIMITS:
            chosen = next((getattr(layer, name) for layer in layers if getattr(layer, name) is not None), None)
            values[name] = min(chosen, getattr(ceiling, name)) if chosen is not None else getattr(ceiling, name)
        mode = next((layer.mode for layer in layers if layer.mode is not None), ceiling.mode)
        return Budget(mode=mode, **values)

    def names_route(self, operator: str, route: str) -> bool:
        """Whether a budget names `route` itself: a configured `[governor.routes."ROUTE"]` or the
        operator's own per-route override (the defaults alone do not)."""
        if route in self.settings.routes:
            return True
        own = self._own.get(operator)
        return own is not None and route in own.routes

    def report(self, operator: str) -> dict[str, Any]:
        """What `GET /budgets` shows: the effective default and per-route budgets, and the
        operator's own overrides."""
        own = self._own.get(operator, _Own())
        routes = sorted(set(self.settings.routes) | set(own.routes))
        return {
            "operator": operator,
            "default": _budget_dict(self.budget(operator, "")),
            "routes": {route: _budget_dict(self.budget(operator, route)) for route in routes},
            "overrides": msgspec.to_builtins(own),
            "configured": {
                "default": _budget_dict(self.settings.budget("")),
                "routes": {route: _budget_dict(self.settings.budget(route)) for route in sorted(self.settings.routes)},
            },
        }

    def update(self, operator: str, body: Any) -> None:
        """Apply `POST /budgets`: `{"default": {...} | null, "routes": {"TOOL": {...} | null}}`.
        A table replaces the override it names, null removes it. All or nothing. In this process
        only: `change` is the one that saves to a shared store first."""
        self._set(operator, self._merged(operator, body))

    async def change(self, operator: str, body: Any) -> None:
        """`update`, for the whole fleet when the overrides are shared: saved there first, and
        refused (`state_unavailable`, nothing changed) when that cannot be done."""
        own = self._merged(operator, body)
        if self.shared is not None:
            value = msgspec.json.encode(own) if own is not None else None
            if not await self.shared.save(operator, value):
                raise BudgetError(
                    "state_unavailable",
                    "the fleet's shared state (Redis) does not answer, so your budgets were not changed on any "
                    "replica: try again in a few seconds",
                )
        self._set(operator, own)

    def _set(self, operator: str, own: _Own | None) -> None:
        if own is None:
            self._own.pop(operator, None)
        else:
            self._own[operator] = own

    def _followed(self, operator: str, value: bytes | None) -> None:
        own = self._decoded(operator, value) if value is not None else None
        self._set(operator, own)

    def _replaced(self, values: dict[str, bytes]) -> None:
        found = {operator: self._decoded(operator, value) for operator, value in values.items()}
        self._own = {operator: own for operator, own in found.items() if own is not None}

    def _decoded(self, operator: str, value: bytes) -> _Own | None:
        try:
            return _own_json.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning(
                "an operator's shared budgets cannot be read; its configured ones apply", extra={"operator": operator}
            )
            return None

    def _merged(self, operator: str, body: Any) -> _Own | None:
        """The operator's overrides once `body` is applied (None: none left); BudgetError when
        the body cannot be used."""
        if not isinstance(body, dict) or not body or set(body) - {"default", "routes"}:
            raise BudgetError(
                "invalid_budgets",
                'send {"default": {"max_bytes": 16384}, "routes": {"TOOL": {"max_records": 20}}} '
                "(either key may be left out; null removes an override)",
            )
        own = self._own.get(operator, _Own())
        default, routes = own.default, dict(own.routes)
        if "default" in body:
            default = self._checked(body["default"], "default", "")
        changes = body.get("routes", {})
        if not isinstance(changes, dict):
            raise BudgetError("invalid_budgets", "routes must be an object of route name → budget (or null)")
        for route, value in changes.items():
            if not route or len(route) > MAX_ROUTE_CHARS:
                raise BudgetError("invalid_budgets", f"a route name has 1 to {MAX_ROUTE_CHARS} characters")
            if value is None:
                routes.pop(route, None)
            else:
                routes[route] = self._checked(value, f"routes.{route}", route)
        if len(routes) > MAX_ROUTES:
            raise BudgetError("invalid_budgets", f"at most {MAX_ROUTES} per-route budgets per operator")
        return _Own(default, routes) if routes or default != RouteBudget() else None

    def _checked(self, value: Any, where: str, route: str) -> RouteBudget:
        if value is None:
            return RouteBudget()
        try:
            budget = msgspec.convert(value, RouteBudget)
        except msgspec.ValidationError as exc:
            raise BudgetError("invalid_budgets", f"at {where}: {exc}") from None
        ceiling = self.settings.budget(route)
        for name in LIMITS:
            given, limit = getattr(budget, name), getattr(ceiling, name)
            if given is not None and given > limit:
                raise BudgetError(
                    "budget_above_limit",
                    f"at {where}.{name}: {given} is above the configured {limit}; an operator can only lower budgets",
                )
        return budget


def _budget_dict(budget: Budget) -> dict[str, Any]:
    return {name: getattr(budget, name) for name in (*LIMITS, "mode")}
