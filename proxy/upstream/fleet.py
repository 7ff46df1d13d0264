"""The one place that builds and runs a set of upstream connections.

    UpstreamSpec     one upstream as configured: a command (stdio) or a URL (HTTP), its
                     environment or headers, timeouts, message cap, and whether it is lazy
    connect(spec)    a fresh connection for it (the HTTP client is imported only for a URL)
    Fleet            the set: built from the config, connected as often as a caller needs a
                     fresh set (a session-era HTTP session that shares none gets its own
                     processes); `connect_one(name)` one of them (upstream.shared)
    run(connections) an async context: each connection entered and, unless lazy, started in the
                     background; on leaving the block, all shut down and their tasks ended

One upstream that fails to start does not take the others down: the failure is logged (or left to
the caller, `log_failures=False`, who reads it from `Running.started()`) and its next request
tries again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import msgspec

from frugal_proxy.errors import UpstreamDown
from frugal_proxy.transports.framing import DEFAULT_MAX_LINE_BYTES
from frugal_proxy.upstream.base import UpstreamBase
from frugal_proxy.upstream.stdio import UpstreamConnection

if TYPE_CHECKING:
    from frugal_proxy.config import Config

# The name this warning has always been logged under (it was serve's); users filter on it.
log = logging.getLogger("frugal_proxy.serve")


class UpstreamSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What it takes to connect to one upstream; `url` set means HTTP, else `command` over stdio."""

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = msgspec.field(default_factory=dict)  # stdio: added to ours
    cwd: str | None = None  # stdio
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)  # HTTP: sent with every request
    probe_timeout: float = 3.0  # how long server/discover may take before it counts as session-era
    connect_timeout: float = 10.0  # HTTP
    read_timeout: float = 300.0  # HTTP
    max_message_bytes: int = DEFAULT_MAX_LINE_BYTES
    lazy: bool = False  # started on first use, not with the others
    share: bool = True  # session-era HTTP sessions may share one connection (upstream.shared)
    # HTTP: what to do when it cannot be reached, where the user wrote no url to check (a
    # built-in provider's own endpoint); None: "check the url".
    unreachable_advice: str | None = None


def connect(spec: UpstreamSpec) -> UpstreamBase:
    """A new, unstarted connection to the upstream `spec` describes."""
    if spec.url is not None:
        # Imported here: the HTTP client costs ~70 ms of start-up that a stdio wrap does not need.
        from frugal_proxy.upstream.http import HttpUpstreamConnection

        return HttpUpstreamConnection(
            spec.url,
            name=spec.name,
            headers=dict(spec.headers),
            probe_timeout=spec.probe_timeout,
            connect_timeout=spec.connect_timeout,
            read_timeout=spec.read_timeout,
            max_message_bytes=spec.max_message_bytes,
            unreachable_advice=spec.unreachable_advice,
        )
    return UpstreamConnection(
        spec.command,
        name=spec.name,
        env=dict(spec.env),
        cwd=spec.cwd,
        probe_timeout=spec.probe_timeout,
        max_line_bytes=spec.max_message_bytes,
    )


class Fleet(msgspec.Struct, frozen=True):
    """A set of upstreams, in order, that can be connected as often as a fresh set is needed."""

    specs: tuple[UpstreamSpec, ...]

    @classmethod
    def from_config(cls, config: Config) -> Fleet:
        """Every `[upstreams.NAME]` of the config; an HTTP one reads for `limits.call_timeout`
        unless it sets its own `read_timeout`."""
        call_timeout = config.limits.call_timeout_seconds
        return cls(
            tuple(
                UpstreamSpec(
                    name=name,
                    command=tuple(upstream.command or ()),
                    url=upstream.url,
                    env=upstream.env,
                    cwd=upstream.cwd,
                    headers=upstream.headers,
                    connect_timeout=upstream.connect_timeout_seconds,
                    read_timeout=upstream.read_timeout_seconds or call_timeout,
                    max_message_bytes=config.limits.max_message_bytes,
                    lazy=upstream.lazy,
                    share=upstream.share,
                )
                for name, upstream in config.upstreams.items()
            )
        )

    @property
    def lazy(self) -> frozenset[str]:
        """The names of the upstreams that start on first use."""
        return frozenset(spec.name for spec in self.specs if spec.lazy)

    def connect(self) -> list[UpstreamBase]:
        """A new, unstarted connection per upstream."""
        return [connect(spec) for spec in self.specs]

    def connect_one(self, name: str) -> UpstreamBase:
        """A new, unstarted connection to the upstream named `name`."""
        return connect(next(spec for spec in self.specs if spec.name == name))


@dataclass(eq=False)
class Running:
    """Connections inside `run`, and the task group they run in (the caller's to use too)."""

    connections: Sequence[UpstreamBase]
    task_group: anyio.abc.TaskGroup
    failures: dict[str, UpstreamDown] = field(default_factory=dict)
    _starts: list[anyio.Event] = field(default_factory=list)

    async def started(self) -> dict[str, UpstreamDown]:
        """Wait until every upstream started in the background has finished its first start;
        the ones that failed, by name."""
        for settled in self._starts:
            await settled.wait()
        return self.failures

    async def _own(
        self,
        upstream: UpstreamBase,
        lazy: bool,
        log_failures: bool,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Own one upstream's lifetime; start it now (in the background) unless it is lazy."""
        settled = anyio.Event()
        if not lazy:
            self._starts.append(settled)
        async with upstream:
            task_status.started()
            if not lazy:
                try:
                    await upstream.ensure_ready()
                except UpstreamDown as exc:
                    self.failures[upstream.name] = exc
                    if log_failures:
                        log.warning(
                            "upstream did not start; its tools answer errors until it does",
                            extra={"reason": str(exc)},
                        )
                finally:
                    settled.set()
            await anyio.sleep_forever()


@asynccontextmanager
async def run(
    connections: Sequence[UpstreamBase], *, lazy: Collection[str] = (), log_failures: bool = True
) -> AsyncIterator[Running]:
    """Enter every connection and start the ones not named in `lazy` in the background; when the
    block ends, shut every one down and end the task group (and what the caller started in it).
    An exception or a cancellation leaving the block ends the task group at once instead (each
    connection shuts itself down as it is left)."""
    async with anyio.create_task_group() as tg:
        running = Running(connections, tg)
        for upstream in connections:
            await tg.start(running._own, upstream, upstream.name in lazy, log_failures)
        yield running
        with anyio.CancelScope(shield=True):
            for upstream in connections:
                await upstream.shutdown()
        tg.cancel_scope.cancel()
