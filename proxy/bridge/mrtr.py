"""Server-to-client requests across the eras.

A session-era server asks its client for sampling, elicitation or roots with a request of its
own in the middle of a call; a 2026-07-28 server answers the call with `input_required` instead
and the client retries it (MRTR). The proxy converts in both directions:

- `HeldCalls` (session-era upstream, modern client): the upstream call stays open, held by the
  proxy. Each server-to-client request it makes becomes an `input_required` result carrying the
  request and a sealed `requestState` naming the held call; the client's retry delivers the
  answer upstream (the error of a client handler that failed as a JSON-RPC error, as directly)
  and waits for the next event of the same call. A held call that the client does not come back
  to is cancelled upstream when its hold expires. A call may first carry a `Question` of the
  proxy's own (the client's roots, say): the call goes upstream only once the
  client's retry has answered it, on the connection that answer chose (a `Carrier`: the
  connection holding those roots) or else the held calls' own.
- `fulfil_input_required` (modern upstream, session-era client): the proxy asks the client each
  embedded request as a real server-to-client request and retries the call upstream with the
  answers, until it completes.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from frugal_proxy.errors import BridgeError
from frugal_proxy.protocol import eras, jsonrpc
from frugal_proxy.protocol.jsonrpc import Frame
from frugal_proxy.protocol.request_state import InvalidRequestState, RequestStateSealer, StateClaims
from frugal_proxy.upstream.base import ProgressHandler, UpstreamBase

log = logging.getLogger("frugal_proxy.bridge")

PROGRESS_KEPT = 64
DEFAULT_HOLD_SECONDS = 300.0
MAX_INPUT_ROUNDS = 10


@dataclass(eq=False)
class _Final:
    reply: Frame | None
    failure: BaseException | None


Answered = Callable[[str, Frame], Awaitable[None]]


class Carrier(NamedTuple):
    """The connection a held call goes on instead of the held calls' own, and what to call
    once the call has ended there."""

    connection: UpstreamBase
    release: Callable[[], None]


@dataclass(frozen=True, eq=False)
class Question:
    """A request the proxy itself asks a modern client before a call goes upstream; `answered`
    takes the client's reply (an error frame when it gave none), and the call waits for it and
    goes on the connection it returns (None: the held calls' own). When `binding`, a call whose
    answer failed fails with that error instead of going on anywhere."""

    method: str
    params: dict[str, Any]
    answered: Callable[[Frame], Awaitable[Carrier | None]]
    binding: bool = False


@dataclass(eq=False)
class HeldCall:
    hold_id: str
    method: str
    capabilities: dict[str, Any]
    send: MemoryObjectSendStream[Frame | _Final]
    receive: MemoryObjectReceiveStream[Frame | _Final]
    upstream: UpstreamBase  # the connection it goes on
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    waiting_for: dict[str, jsonrpc.RequestId] = field(default_factory=dict)
    asked: dict[str, str] = field(default_factory=dict)  # input key -> the method asked
    own: dict[jsonrpc.RequestId, Question] = field(default_factory=dict)  # the proxy's questions, by id
    gate: anyio.Event | None = None  # set once the proxy's own question is answered
    carrier: Carrier | None = None  # the connection its question's answer chose
    refused: Exception | None = None  # why a binding question's answer let it go nowhere
    on_progress: ProgressHandler | None = None  # the current leg's; None between legs
    # Progress the upstream reported between two legs (after one answered input_required, before
    # the client's retry): delivered on the next leg, the last PROGRESS_KEPT of it.
    progress_held: deque[dict[str, msgspec.Raw]] = field(default_factory=lambda: deque(maxlen=PROGRESS_KEPT))
    finished: bool = False
    opened_at: float = field(default_factory=time.monotonic)
    expires_at: float = math.inf


class HeldCalls:
    """Upstream calls held open across a modern client's MRTR retries."""

    def __init__(
        self,
        upstream: UpstreamBase,
        task_group: anyio.abc.TaskGroup,
        sealer: RequestStateSealer | None = None,
        hold_seconds: float = DEFAULT_HOLD_SECONDS,
        *,
        on_answer: Answered | None = None,
    ) -> None:
        """`on_answer` hears each answer the client gives to an upstream request (method, reply)."""
        self._upstream = upstream
        self._on_answer = on_answer
        self._tg = task_group
        self._sealer = sealer or RequestStateSealer()
        self._hold_seconds = hold_seconds
        self._calls: dict[str, HeldCall] = {}
        self._keys = itertools.count(1)

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def open(self) -> bool:
        """Whether some call is held open, so that an upstream request has a call to ride on."""
        return any(not held.finished for held in self._calls.values())

    async def call(
        self,
        method: str,
        params: dict[str, msgspec.Raw],
        capabilities: dict[str, Any],
        on_progress: ProgressHandler | None,
        *,
        first: Question | None = None,
    ) -> Frame:
        """One leg of a modern client's call: the first (asking `first` of the client before the
        call goes upstream, when given), or a retry carrying inputResponses."""
        state = jsonrpc.decode_any(params["requestState"]) if "requestState" in params else None
        if state is None:
            held = self._open(method, params, capabilities, first)
        else:
            held = await self._resume(state, params)
        held.on_progress = on_progress
        held.scope.deadline = math.inf
        held.expires_at = math.inf
        while held.progress_held and on_progress is not None:
            await on_progress(held.progress_held.popleft())
        try:
            return await self._next_event(held)
        except anyio.get_cancelled_exc_class():
            # The client cancelled this leg: the whole call is abandoned.
            self._finish(held)
            held.scope.cancel()
            raise
        finally:
            held.on_progress = None  # this leg's stream is answered; what comes next waits for the retry

    def _open(
        self, method: str, params: dict[str, msgspec.Raw], capabilities: dict[str, Any], first: Question | None
    ) -> HeldCall:
        self._sweep()
        send, receive = anyio.create_memory_object_stream[Frame | _Final](math.inf)
        held = HeldCall(secrets.token_urlsafe(12), method, capabilities, send, receive, self._upstream)
        self._calls[held.hold_id] = held
        if first is not None:
            own_id = f"frugal-{held.hold_id}"
            held.own[own_id] = first
            held.gate = anyio.Event()
            send.send_nowait(jsonrpc.request(own_id, first.method, first.params))

        async def progress(progress_params: dict[str, msgspec.Raw]) -> None:
            if held.on_progress is not None:
                await held.on_progress(progress_params)
            else:
                held.progress_held.append(progress_params)

        async def run() -> None:
            final = _Final(None, None)
            with held.scope:
                try:
                    if held.gate is not None:
                        await held.gate.wait()  # the proxy's own question comes first
                    if held.refused is not None:
                        raise held.refused
                    final.reply = await held.upstream.request(method, params, on_progress=progress)
                except Exception as exc:
                    final.failure = exc
                finally:
                    if held.carrier is not None:
                        held.carrier.release()
            abandoned = final.reply is None and final.failure is None
            if abandoned:
                final.failure = BridgeError(
                    f"the call was abandoned: the client did not retry it within {self._hold_seconds:.0f} s",
                    jsonrpc.INTERNAL_ERROR,
                )
            try:
                held.send.send_nowait(final)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # nobody will collect it: the call was abandoned or cancelled
            if abandoned:
                self._finish(held)

        self._tg.start_soon(run)
        return held

    async def _resume(self, state: object, params: dict[str, msgspec.Raw]) -> HeldCall:
        try:
            if not isinstance(state, str):
                raise InvalidRequestState("requestState must be a string")
            claims = self._sealer.open(state)
        except InvalidRequestState as exc:
            raise BridgeError(
                f"{exc}; retry the original request without requestState", jsonrpc.INVALID_PARAMS
            ) from None
        held = self._calls.get(claims.hold_id)
        if held is None or held.finished:
            raise BridgeError(
                "the call this requestState belongs to has ended; retry the original request without requestState",
                jsonrpc.INVALID_PARAMS,
            )
        answers = jsonrpc.sub_object(params, "inputResponses")
        for key in claims.keys:
            upstream_id = held.waiting_for.pop(key, None)
            method = held.asked.pop(key, "")
            if upstream_id is None:
                continue
            if key in answers:
                reply = answer_for_upstream(upstream_id, answers[key])
            else:
                reply = jsonrpc.error(upstream_id, jsonrpc.INTERNAL_ERROR, "the client gave no answer")
            question = held.own.pop(upstream_id, None)
            if question is not None:
                try:
                    held.carrier = await question.answered(reply)
                    if held.carrier is not None:
                        held.upstream = held.carrier.connection
                except anyio.get_cancelled_exc_class():
                    # This leg was cancelled (its deadline, the client): the whole call is abandoned,
                    # so it never goes upstream after its client was told it ended.
                    self._finish(held)
                    held.scope.cancel()
                    raise
                except Exception as exc:  # the call goes on (the upstream's own answer will tell), unless bound
                    log.warning("the proxy's own question failed", extra={"reason": str(exc)[:200]})
                    if question.binding:
                        held.refused = exc
                finally:
                    if held.gate is not None:
                        held.gate.set()
                continue
            await held.upstream.send_reply(reply)
            if self._on_answer is not None:
                await self._on_answer(method, reply)
        return held

    async def _next_event(self, held: HeldCall) -> Frame:
        event = await held.receive.receive()
        if isinstance(event, _Final):
            self._finish(held)
            if event.failure is not None:
                raise event.failure
            assert event.reply is not None
            return event.reply
        requests = [event]
        while True:
            try:
                more = held.receive.receive_nowait()
            except anyio.WouldBlock:
                break
            if isinstance(more, _Final):
                held.send.send_nowait(more)  # keep it for the next leg, after these answers
                break
            requests.append(more)
        input_requests: dict[str, Any] = {}
        for frame in requests:
            method = jsonrpc.method_of(frame) or ""
            key = f"{method.rsplit('/', 1)[-1]}-{next(self._keys)}"
            held.waiting_for[key] = jsonrpc.id_of(frame) or 0
            held.asked[key] = method
            body: dict[str, msgspec.Raw] = {"method": jsonrpc.raw(method)}
            if "params" in frame:
                body["params"] = frame["params"]
            input_requests[key] = body
        claims = StateClaims(held.hold_id, tuple(input_requests), time.time() + self._hold_seconds)
        held.scope.deadline = anyio.current_time() + self._hold_seconds
        held.expires_at = time.monotonic() + self._hold_seconds
        result = {
            "resultType": "input_required",
            "inputRequests": input_requests,
            "requestState": self._sealer.seal(claims),
        }
        return jsonrpc.result(None, result)

    def _sweep(self) -> None:
        """Forget held calls whose client never came back (their upstream part has ended)."""
        now = time.monotonic()
        for held in [h for h in self._calls.values() if h.expires_at < now]:
            self._finish(held)
            held.scope.cancel()

    def _finish(self, held: HeldCall) -> None:
        held.finished = True
        self._calls.pop(held.hold_id, None)
        held.send.close()
        held.receive.close()

    async def attach(self, frame: Frame, upstream: UpstreamBase | None = None) -> None:
        """Route a server-to-client request of the upstream (or of `upstream`, a connection a
        question's answer chose) to the call it belongs to."""
        method = jsonrpc.method_of(frame) or ""
        ident = jsonrpc.id_of(frame)
        upstream = upstream or self._upstream
        open_calls = [held for held in self._calls.values() if not held.finished and held.upstream is upstream]
        if not open_calls:
            await upstream.send_reply(
                jsonrpc.error(
                    ident,
                    jsonrpc.METHOD_NOT_FOUND,
                    f"frugal-proxy: {method} can only be bridged to a 2026-07-28 client during a "
                    "tools/call, prompts/get or resources/read",
                )
            )
            return
        # stdio carries no link from a server request to the call that caused it; the most
        # recent open call is the best guess, and any open call is a correct carrier: the
        # answer goes back to the upstream whichever call's retry brings it.
        held = max(open_calls, key=lambda call: call.opened_at)
        needed = eras.SERVER_REQUEST_CAPABILITY.get(method)
        if needed is not None and needed not in held.capabilities:
            log.warning(
                "upstream asked for a capability the client did not declare",
                extra={"method": method, "capability": needed},
            )
            await upstream.send_reply(
                jsonrpc.error(
                    ident,
                    jsonrpc.METHOD_NOT_FOUND,
                    f"the client did not declare the {needed!r} capability, so {method} cannot be answered",
                )
            )
            return
        held.send.send_nowait(frame)


# What an input response holds when it is a result (ElicitResult, CreateMessageResult, ListRootsResult).
RESULT_KEYS = frozenset({"action", "content", "role", "model", "roots"})


def answer_for_upstream(upstream_id: jsonrpc.RequestId, response: msgspec.Raw) -> Frame:
    """The reply to a session-era upstream's request from a modern client's input response: a
    result, or, when the client's handler failed and it sent its error (`{"code", "message"}`,
    or that under `"error"`), the JSON-RPC error a session-era client would have answered, so
    the upstream fails its own way, as it does directly."""
    if b'"code"' not in bytes(response):
        return jsonrpc.result(upstream_id, response)  # the usual case, passed on as it came
    value = jsonrpc.decode_any(response)
    error = value.get("error") if isinstance(value, dict) and isinstance(value.get("error"), dict) else value
    if not isinstance(error, dict) or RESULT_KEYS & error.keys():
        return jsonrpc.result(upstream_id, response)
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
        return jsonrpc.result(upstream_id, response)
    return jsonrpc.error(upstream_id, code, message, error.get("data"))


Ask = Callable[[str, Any], Awaitable[Frame]]
Retry = Callable[[dict[str, msgspec.Raw]], Awaitable[Frame]]


async def fulfil_input_required(
    reply: Frame,
    params: dict[str, msgspec.Raw],
    *,
    capabilities: dict[str, Any],
    ask: Ask,
    retry: Retry,
) -> Frame:
    """Drive a modern upstream's `input_required` answers to completion for a session-era client.

    Each embedded request is asked of the client as a server-to-client request; the call is
    retried upstream with the answers and the echoed requestState. Raises BridgeError when the
    client lacks a needed capability, refuses a request, or the rounds run out.
    """
    backoff = 0.05
    for _ in range(MAX_INPUT_ROUNDS):
        if "result" not in reply:
            return reply
        body = jsonrpc.decode_any(reply["result"])
        if not isinstance(body, dict) or body.get("resultType") != "input_required":
            return reply
        requests = body.get("inputRequests") or {}
        answers: dict[str, Any] = {}
        if requests:
            answers = await _ask_all(requests, capabilities, ask)
            backoff = 0.05
        else:
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, 0.25)
        next_params = {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}
        if answers:
            next_params["inputResponses"] = jsonrpc.raw(answers)
        if body.get("requestState") is not None:
            next_params["requestState"] = jsonrpc.raw(body["requestState"])
        reply = await retry(next_params)
    raise BridgeError(
        f"the upstream asked for input more than {MAX_INPUT_ROUNDS} times; giving up",
        jsonrpc.INTERNAL_ERROR,
    )


async def _ask_all(requests: dict[str, Any], capabilities: dict[str, Any], ask: Ask) -> dict[str, Any]:
    for request in requests.values():
        method = request.get("method") if isinstance(request, dict) else None
        needed = eras.SERVER_REQUEST_CAPABILITY.get(method or "")
        if needed is None:
            raise BridgeError(f"the upstream asked for {method!r}, which MCP does not define", -32603)
        if needed not in capabilities:
            raise BridgeError(
                f"the upstream needs the client's {needed!r} capability ({method}), and this client "
                "did not declare it in initialize",
                jsonrpc.MISSING_CLIENT_CAPABILITY,
            )
    answers: dict[str, Any] = {}
    refusal: list[str] = []

    async def one(key: str, request: dict[str, Any]) -> None:
        reply = await ask(request["method"], request.get("params"))
        problem = jsonrpc.error_of(reply)
        if problem is not None:
            refusal.append(f"{request['method']}: {problem[1]} ({problem[0]})")
            tg.cancel_scope.cancel()
            return
        answers[key] = jsonrpc.decode_any(reply["result"])

    try:
        async with anyio.create_task_group() as tg:
            for key, request in requests.items():
                tg.start_soon(one, key, request)
    except BaseExceptionGroup as group:
        # The questions are asked together, but one that fails fails the round: raise its own
        # exception (ClientGone above all) so the caller's handlers see it, not a task group's.
        raise group.exceptions[0] from None
    if refusal:
        raise BridgeError(f"the client refused the upstream's request: {refusal[0]}", jsonrpc.INTERNAL_ERROR)
    return answers
