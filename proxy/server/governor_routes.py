"""The size governor over plain JSON, beside `/mcp`, behind the same guard; each request acts for
its operator (the bearer token's identity, `local` without auth).

    POST /shape              {route, text | result, max_chars?} → the shaped result and receipts
    POST /fetch-slice        {artifact_id, offset?, limit?, max_chars?} → a slice of the
                             operator's own spilled payload
    GET  /budgets            the operator's effective budgets (default and per route)
    POST /budgets            lower the operator's own budgets (governor.operator_budgets)
    GET  /verify-key         the key ids receipts are accepted from, the signing one marked
    POST /receipts/verify    {receipt} → valid or not, and which key signed it
    POST /register           {operator} → a new operator and its token, shown once
                             (only with auth.open_registration = true; needs no token)

The answers are the governor tools' reports (providers.governor_tools). Errors are
`{"error": CODE, "message": …}`: 400 for a bad body or arguments (`invalid_request`,
`invalid_arguments`, `invalid_slice_range`, `invalid_budgets`, `budget_above_limit`,
`invalid_operator`), 404 `unknown_artifact` (also another operator's id), 410
`artifact_expired`, 421 `artifact_elsewhere` (a fleet: another replica alone holds it), 503
`spill_unavailable` / `state_unavailable` (a fleet: the shared spill store does not answer;
budgets not changed while Redis does not answer), 403
`registration_closed` / `registration_full`, 409 `operator_exists`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from frugal_proxy.governor.engine import Governor
from frugal_proxy.governor.operator_budgets import BudgetError
from frugal_proxy.identities import InvalidOperator
from frugal_proxy.protocol import limits
from frugal_proxy.providers import governor_tools
from frugal_proxy.server.guard import REGISTER_PATH, BodyTooLarge, GuardSettings, operator_of, read_body
from frugal_proxy.server.operators import (
    REGISTRATION_CLOSED,
    Operators,
    RegistrationRefused,
)

log = logging.getLogger("frugal_proxy.governor_http")

PATHS = ("/shape", "/fetch-slice", "/budgets", "/verify-key", "/receipts/verify", REGISTER_PATH)
STATUS = {
    "unknown_artifact": 404,
    "artifact_expired": 410,
    "artifact_elsewhere": 421,  # a fleet: kept by the replica the message names
    "spill_unavailable": 503,  # a fleet: the shared spill store does not answer
    "artifact_corrupt": 500,
    "governor_disabled": 404,
    "registration_closed": 403,
    "registration_full": 403,
    "operator_exists": 409,
    "registry_unavailable": 503,
    "state_unavailable": 503,  # a fleet: budgets cannot be changed while Redis does not answer
    "body_too_large": 413,
}
NO_STORE = {"Cache-Control": "no-store"}

Handler = Callable[[Request], Awaitable[Response]]


def problem(code: str, message: str, status: int | None = None, **extra: Any) -> JSONResponse:
    """The JSON error every governor endpoint answers with."""
    status = status or STATUS.get(code, 400)
    level = logging.WARNING if status < 500 else logging.ERROR
    log.log(level, "governor HTTP request refused", extra={"status": status, "code": code})
    return JSONResponse({"error": code, "message": message, **extra}, status, NO_STORE)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (an unknown path, a method a route does not take) as JSON."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return JSONResponse({"error": code, "message": message}, exc.status_code, exc.headers)


class GovernorHttp:
    """The handlers, bound to the proxy's governor (None when it is off) and operators."""

    def __init__(self, governor: Governor | None, operators: Operators | None, body_cap: int) -> None:
        self.governor = governor
        self.operators = operators
        self.body_cap = body_cap

    def routes(self) -> list[Route]:
        return [
            Route("/shape", self._governed(self._shape), methods=["POST"]),
            Route("/fetch-slice", self._governed(self._fetch_slice), methods=["POST"]),
            Route("/budgets", self._governed(self._budgets), methods=["GET", "POST"]),
            Route("/verify-key", self._governed(self._verify_key), methods=["GET"]),
            Route("/receipts/verify", self._governed(self._verify_receipt), methods=["POST"]),
            Route(REGISTER_PATH, self.register, methods=["POST"]),
        ]

    def _governed(self, handler: Callable[[Request, Governor], Awaitable[Response]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            if self.governor is None:
                return problem("governor_disabled", "the size governor is off on this proxy (--no-govern)")
            try:
                return await handler(request, self.governor)
            except governor_tools.GovernorRequestError as exc:
                return problem(exc.code, exc.message)

        return endpoint

    async def _body(self, request: Request) -> dict[str, Any]:
        """The request's JSON object; raises GovernorRequestError when it is not one."""
        try:
            raw = await read_body(request.stream(), request.headers.get("content-length"), self.body_cap)
        except BodyTooLarge:
            raise governor_tools.GovernorRequestError(
                "body_too_large", f"the request body is over the {self.body_cap}-byte limit"
            ) from None
        except ClientDisconnect:
            raise governor_tools.GovernorRequestError("invalid_request", "the client went away mid-body") from None
        body = _decoded(raw)
        if not isinstance(body, dict):
            raise governor_tools.GovernorRequestError("invalid_request", "the body must be a JSON object")
        return body

    async def _shape(self, request: Request, governor: Governor) -> Response:
        report = await governor_tools.shape_result(governor, operator_of(request), await self._body(request))
        return JSONResponse(report)

    async def _fetch_slice(self, request: Request, governor: Governor) -> Response:
        report = await governor_tools.fetch_slice(governor, operator_of(request), await self._body(request))
        return JSONResponse(report)

    async def _verify_receipt(self, request: Request, governor: Governor) -> Response:
        return JSONResponse(await governor_tools.verify_receipt(governor, await self._body(request)))

    async def _verify_key(self, request: Request, governor: Governor) -> Response:
        signing = (await governor.signer.key()).key_id
        public = await governor.signer.accepted()
        listed = [{"key_id": key_id, "signing": key_id == signing} for key_id in public]
        return JSONResponse({"signing_key_id": signing, "keys": listed})

    async def _budgets(self, request: Request, governor: Governor) -> Response:
        operator = operator_of(request)
        if request.method == "POST":
            try:
                await governor.budgets.change(operator, await self._body(request))
            except BudgetError as exc:
                return problem(exc.code, str(exc))
            log.info("an operator changed its budgets", extra={"operator": operator})
        return JSONResponse(governor.budgets.report(operator))

    async def register(self, request: Request) -> Response:
        if self.operators is None or not self.operators.open_registration:
            return problem("registration_closed", REGISTRATION_CLOSED)
        try:
            body = await self._body(request)
        except governor_tools.GovernorRequestError as exc:
            return problem(exc.code, exc.message)
        name = body.get("operator")
        if not isinstance(name, str) or set(body) != {"operator"}:
            return problem("invalid_request", 'send {"operator": "<name>"} and nothing else')
        try:
            operator, token = await self.operators.register(name)
        except InvalidOperator as exc:
            return problem("invalid_operator", str(exc))
        except RegistrationRefused as exc:
            extra: dict[str, Any] = {"operator": exc.operator} if exc.operator else {}
            return problem(exc.code, str(exc), None, **extra)
        body = {"operator": operator, "token": token, "note": "shown once: only its hash is kept"}
        return JSONResponse(body, 201, NO_STORE)


# What to do about a body that breaks one of the line limits (protocol.limits), as on /mcp.
_LIMIT_ADVICE = (
    "send a body that keeps the limits /mcp keeps: at most "
    f"{limits.MAX_DEPTH} levels of arrays and objects, UTF-8, numbers within a 64-bit float, integers "
    f"of at most {limits.MAX_INTEGER_CHARS} characters (a larger one as a string); a deeper result "
    "can go to /shape as a string in `text`"
)


def _decoded(raw: bytes) -> Any:
    """The body's JSON value, checked against the line limits before msgspec recurses into it;
    raises GovernorRequestError (400) naming the limit a body breaks and what to send instead."""
    try:
        value = limits.checked(raw)
    except limits.LineRefused as exc:
        what = f"the body is {exc}" if exc.parse else f"the body breaks a limit: {exc}"
        raise governor_tools.GovernorRequestError("invalid_request", f"{what}; {_LIMIT_ADVICE}") from None
    if value is not limits.UNREAD:
        return value
    try:  # over limits.FULL_CHECK_BYTES: its nesting and UTF-8 are checked, its values are read here
        return msgspec.json.decode(raw)
    except msgspec.ValidationError as exc:
        message = f"the body breaks a limit: {limits.value_message(exc)}; {_LIMIT_ADVICE}"
        raise governor_tools.GovernorRequestError("invalid_request", message) from None
    except msgspec.DecodeError as exc:
        raise governor_tools.GovernorRequestError("invalid_request", f"the body is not JSON: {exc}") from None


def governor_routes(governor: Governor | None, guard: GuardSettings) -> list[Route]:
    """The governor's endpoints (answering `governor_disabled` when there is no governor)."""
    return GovernorHttp(governor, guard.operators, guard.body_cap).routes()
