"""The loop guard: the same call made again and again is refused before any provider is reached.

`routing.loop_limit` (default 5; 0 turns it off) identical calls inside `routing.loop_window`
(default 60 s, sliding) go ahead; the next one is refused:

    frugal__search: loop guard: this exact frugal__search call has been made 6 times in the
    last 1m0s (limit 5); the result will not change, so change the arguments or wait 48s

Refused calls count, so a loop that keeps calling keeps being refused. Identical means the same
tool and operator and the same arguments once normalized: a routed tool's typed request (its
defaults filled in, strings trimmed, the provider's spelling folded) and its strategy; a plain
tool's arguments (strings trimmed), for the upstreams that opt in (`loop_guard = true`). Each
tool has its own fingerprint space. Only blake3 digests of the arguments are kept (state's
CallWindows, bounded); nothing about the call is written anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from frugal_proxy.config import format_duration
from frugal_proxy.policies import Policy, normalized_request
from frugal_proxy.protocol import canonical, jsonrpc
from frugal_proxy.records import Decision, Exchange
from frugal_proxy.state.call_windows import CallWindows


class LoopGuard(Policy):
    name = "loop guard"

    def __init__(
        self,
        limit: int,
        window: float,
        windows: CallWindows,
        clock: Callable[[], float] = time.time,
        upstreams: Collection[str] = (),
    ) -> None:
        self.limit = limit
        self.window = window
        self.windows = windows
        self.clock = clock
        self.upstreams = frozenset(upstreams)  # the plain tools' upstreams that opted in

    async def admit(self, exchange: Exchange) -> None:
        if not self.limit:
            return
        key = self.fingerprint(exchange)
        if key is None:
            return
        now = self.clock()
        times = await self.windows.note(key, now, self.window, self.limit + 1)
        if len(times) <= self.limit:
            return
        # The next identical call goes ahead once all but limit - 1 of these have left the window.
        wait = times[-self.limit] + self.window - now
        tool = exchange.call.tool
        why = (
            f"this exact {tool} call has been made {len(times)} times in the last {format_duration(self.window)} "
            f"(limit {self.limit}); the result will not change, so change the arguments or wait {format_duration(wait)}"
        )
        exchange.trace.append(Decision("admit", self.name, "refused", why))
        message = f"{tool}: {self.name}: {why}"
        exchange.answer = jsonrpc.result(exchange.call.request_id, jsonrpc.tool_error_result(message))

    def fingerprint(self, exchange: Exchange) -> str | None:
        """The call's digest, or None for a call the guard does not watch."""
        route = exchange.route
        if exchange.request is not None:
            # The normalized request and its ceiling apart: the same calls as one with its ceiling.
            request, ceiling = normalized_request(exchange), getattr(exchange.request, "max_cost_usd", None)
            return canonical.digest([exchange.operator, exchange.call.tool, route.strategy, request, ceiling])
        if route.capability is None and any(provider in self.upstreams for provider in route.providers):
            raw = exchange.call.params.get("arguments")
            arguments = _normalized(jsonrpc.decode_any(raw)) if raw is not None else None
            return canonical.digest([exchange.operator, exchange.call.tool, arguments])
        return None


def _normalized(value: Any) -> Any:
    """A plain tool's arguments with their strings trimmed, all the way down."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return {key: _normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalized(item) for item in value]
    return value
