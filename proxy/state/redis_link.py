"""The connection to the shared Redis of `[state] backend = "redis"`, and whether it answers.

    RedisLink     one pooled redis-py asyncio client (hiredis parses the replies) for every
                  Redis store of the process, every command under the configured timeout; and
                  a small pool of its own for the spill store's large values (`bulk`), whose
                  timeout allows for moving one of them
    Ride          a read queued to go with the next command sent (`ride`, `take`)
    Unreachable   what a store raises when a write that money depends on could not be made

One round trip per pipeline phase: a store sends its command (a script, a read) with `send` or
`call`, and whatever reads the phase queued beforehand with `ride` (the result cache's lookup,
queued before the loop guard's script runs) go in the same pipeline. A read nothing carried is
sent when it is taken. Scripts run by EVALSHA; a server that lost them (restarted) gets them
loaded again and the commands it refused sent again: one extra round trip after a restart.

Redis unreachable is a state, not a crash: `run` answers UNREACHABLE instead of raising, the
first failure logs a warning ("going degraded"), the first success after it logs an info
("recovered"), nothing is logged per call. While degraded a command is not even tried until the
back-off has passed (BACKOFF_FIRST doubling to BACKOFF_MOST), so a call never waits on a dead
or stopped server longer than one command timeout. `watch` (started with the process) keeps the
stores' local mirrors fresh from the `<prefix>events` pub/sub channel, reloads them whole each
time it (re)subscribes, and pings while degraded, so recovery needs no call.

redis-py and not another client: it is Redis's own Python client, its asyncio client runs on
anyio's asyncio backend as it is, hiredis makes its replies cheap to parse, and its scripts
fall back from EVALSHA to loading the script when a restarted server has lost it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import anyio.abc

log = logging.getLogger("frugal_proxy.state")

BACKOFF_FIRST = 0.25  # seconds before the first retry after a failure
BACKOFF_MOST = 5.0
WATCH_POLL = 1.0  # seconds between the watcher's checks: the mirrors' staleness bound when idle
BULK_RATE = 32 * 1024 * 1024  # bytes a second a large value is allowed to take, at the least
BULK_POOL = 4  # connections for large values


class _Unreachable:
    def __repr__(self) -> str:
        return "UNREACHABLE"


UNREACHABLE: Final = _Unreachable()
REASON = "state: redis unreachable"

Command = tuple[Any, ...]  # what redis-py's execute_command takes: ("GET", key), ("EVALSHA", sha, 1, key, …)


class Unreachable(Exception):
    """Redis did not answer in time: the step that needed it was not taken."""

    def __init__(self) -> None:
        super().__init__(REASON)


class Ride:
    """A read that goes with the next command the link sends (or alone, when it is taken first)."""

    def __init__(self, command: Command) -> None:
        self.command = command
        self.sent = False
        self.reply: Any = UNREACHABLE
        self.done = anyio.Event()

    def answer(self, reply: Any) -> None:
        self.reply = reply
        self.done.set()


@dataclass
class Mirror:
    """One store's local copy of what Redis holds: `reload` reads it whole (after a reconnect),
    `apply` takes one pub/sub event of its kind."""

    kind: str
    reload: Callable[[], Awaitable[None]]
    apply: Callable[[list[str]], None]


@dataclass
class RedisLink:
    url: str
    prefix: str = "frugal:"
    password: str | None = None
    pool_size: int = 16
    connect_timeout: float = 1.0
    timeout: float = 0.5
    client: Any = None
    degraded: bool = False
    mirrors: list[Mirror] = field(default_factory=list)
    _retry_at: float = 0.0
    _backoff: float = BACKOFF_FIRST
    _changed: anyio.Event = field(default_factory=anyio.Event)
    _bulk: Any = None
    _bulk_timeout: float = 0.0
    _riding: list[Ride] = field(default_factory=list)
    _scripts: dict[str, Any] = field(default_factory=dict)  # by sha1: what to load again

    def __post_init__(self) -> None:
        self.client = self._client(self.pool_size)

    def bulk(self, largest: int) -> tuple[Any, float]:
        """A client for values up to `largest` bytes and its per-command timeout: the configured
        one plus the time to move such a value at BULK_RATE, so that a large payload on a busy
        machine is not taken for Redis being down (the money commands keep their short one)."""
        if self._bulk is None:
            self._bulk_timeout = self.timeout + largest / BULK_RATE
            self._bulk = self._client(BULK_POOL, self._bulk_timeout)
        return self._bulk, self._bulk_timeout

    def _client(self, size: int, timeout: float | None = None) -> Any:
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # No retries inside redis-py: one attempt, bounded by the timeout; the back-off is ours. A
        # blocking pool: a burst of calls beyond pool_size waits for a connection, it does not fail.
        pool = BlockingConnectionPool.from_url(
            self.url,
            password=self.password,
            max_connections=size,
            timeout=self.connect_timeout,
            socket_timeout=timeout or self.timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=Retry(NoBackoff(), 0),
        )
        return Redis(connection_pool=pool)

    @property
    def events(self) -> str:
        return f"{self.prefix}events"

    def key(self, kind: str, *parts: str) -> str:
        """`frugal:spend:2026-12-03`: the prefix, the kind, then what it is about."""
        return ":".join((f"{self.prefix}{kind}", *parts))

    def script(self, source: str) -> Any:
        """A Lua script run with EVALSHA (loaded again if the server lost it): `call` it, or
        `run` it alone (`lambda: script(keys=…, args=…)`)."""
        script = self.client.register_script(source)
        self._scripts[script.sha] = script
        return script

    def ride(self, *command: Any) -> Ride:
        """Queue a read to go with the next command this link sends; `take` its reply."""
        ride = Ride(command)
        self._riding.append(ride)
        return ride

    async def take(self, ride: Ride) -> Any:
        """The read's reply (UNREACHABLE when Redis did not answer): the command that carried it
        brought it, or, if none has yet, it is sent now with whatever else is queued."""
        if not ride.sent:
            await self.send()
        await ride.done.wait()
        return ride.reply

    async def call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a script (`script`), with the queued reads: its reply, or UNREACHABLE."""
        replies = await self.send(("EVALSHA", script.sha, len(keys), *keys, *args))
        return replies if replies is UNREACHABLE else replies[0]

    async def send(self, *commands: Command) -> Any:
        """Send the commands and every queued read in one round trip (one pipeline): the
        commands' replies in order, or UNREACHABLE (the reads then get UNREACHABLE too)."""
        riding, self._riding = self._riding, []
        for ride in riding:
            ride.sent = True
        replies: Any = UNREACHABLE
        try:
            replies = await self.run(lambda: self._batch([*commands], [ride.command for ride in riding]))
        finally:  # answered, failed or cancelled: no read waits for ever
            for number, ride in enumerate(riding):
                reply = replies if replies is UNREACHABLE else replies[len(commands) + number]
                ride.answer(UNREACHABLE if isinstance(reply, Exception) else reply)
        return replies if replies is UNREACHABLE else replies[: len(commands)]

    async def _batch(self, commands: list[Command], reads: list[Command]) -> list[Any]:
        """One round trip: a lone command as it is, several as a pipeline (no transaction: each
        script is atomic on its own). The reads' errors are returned as replies; a command's is
        raised (`run` counts it as Redis not answering). Scripts the server had lost (it was
        restarted) are loaded and their commands sent again."""
        sent = [*commands, *reads]
        replies = await self._pipelined(sent)
        lost = [n for n, reply in enumerate(replies) if isinstance(reply, _no_script())]
        if lost:
            shas = dict.fromkeys(sent[n][1] for n in lost)
            await self._pipelined([("SCRIPT", "LOAD", self._scripts[sha].script) for sha in shas])
            for n, reply in zip(lost, await self._pipelined([sent[n] for n in lost]), strict=True):
                replies[n] = reply
        failed = next((reply for reply in replies[: len(commands)] if isinstance(reply, Exception)), None)
        if failed is not None:
            raise failed
        return replies

    async def _pipelined(self, commands: list[Command]) -> list[Any]:
        if len(commands) == 1:
            try:
                return [await self.client.execute_command(*commands[0])]
            except _response_error() as error:
                return [error]
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))

    def mirror(self, kind: str, reload: Callable[[], Awaitable[None]], apply: Callable[[list[str]], None]) -> None:
        self.mirrors.append(Mirror(kind, reload, apply))

    async def run(self, command: Callable[[], Awaitable[Any]], *, now: bool = False, allowance: float = 0.0) -> Any:
        """The command's reply, or UNREACHABLE when Redis did not answer within the timeout (a
        `bulk` client's: pass it as `allowance`), or is still inside its back-off after a failure
        (unless `now`)."""
        if self.degraded and not now and time.monotonic() < self._retry_at:
            return UNREACHABLE
        try:
            with anyio.fail_after((allowance or self.timeout) + self.connect_timeout):
                reply = await command()
        except (OSError, TimeoutError, _redis_errors()) as error:
            self._failed(error)
            return UNREACHABLE
        self._answered()
        return reply

    def _failed(self, error: BaseException) -> None:
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MOST)
        if not self.degraded:
            self.degraded = True
            self._notify()
            log.warning(
                "state: redis unreachable, going degraded: paid providers with a cap or a free quota are "
                "skipped, the cache misses, loop-guard windows count on this replica alone",
                extra={"error": type(error).__name__, "detail": str(error)[:200]},
            )

    def _answered(self) -> None:
        self._backoff = BACKOFF_FIRST
        if self.degraded:
            self.degraded = False
            self._notify()
            log.info("state: redis answers again; shared state recovered")

    @property
    def state(self) -> str:
        """`ok` or `degraded`, for /healthz and `status`."""
        return "degraded" if self.degraded else "ok"

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the mirrors fresh for the life of the process: subscribe to the events channel,
        reload every mirror, then apply each event as it comes; when the subscription breaks or
        a ping goes unanswered, go degraded and start over after the back-off."""
        ready: list[Callable[[], None]] = [lambda: task_status.started()]  # subscribed and loaded, or failed once
        while True:
            await self._subscribed(ready)
            await anyio.sleep(max(self._retry_at - time.monotonic(), WATCH_POLL / 4))

    async def _subscribed(self, ready: list[Callable[[], None]]) -> None:
        # The subscription has a client of its own, new each time, so that a connection the
        # outage left half closed never goes back to the commands' pool.
        listener = self._client(1)
        pubsub = listener.pubsub(ignore_subscribe_messages=True)
        try:
            with anyio.fail_after(self.timeout + self.connect_timeout):
                await pubsub.subscribe(self.events)
            if self.degraded:
                # Idle connections left from before the outage may be half closed: start afresh.
                await self.client.connection_pool.disconnect(inuse_connections=False)
                if self._bulk is not None:
                    await self._bulk.connection_pool.disconnect(inuse_connections=False)
                if await self.run(self.client.ping, now=True) is UNREACHABLE:
                    return
            for mirror in self.mirrors:
                await mirror.reload()
            while ready:
                ready.pop()()
            if self.degraded:
                return  # a reload did not get through: try again after the back-off
            while True:
                message = await pubsub.get_message(timeout=WATCH_POLL)
                if message is None:
                    if await self.run(self.client.ping) is UNREACHABLE:
                        return
                    continue
                self._apply(message.get("data"))
        except (OSError, TimeoutError, _redis_errors()) as error:
            self._failed(error)
            while ready:
                ready.pop()()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeout):
                await pubsub.aclose()
                await listener.aclose(close_connection_pool=True)

    def _apply(self, data: Any) -> None:
        if not isinstance(data, bytes):
            return
        kind, *rest = data.decode("utf-8", "replace").split(" ")
        for mirror in self.mirrors:
            if mirror.kind == kind:
                mirror.apply(rest)
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def changed(self) -> None:
        """Return at the next change: an event applied to a mirror, degraded, recovered."""
        await self._changed.wait()

    async def probe(self) -> tuple[str, float]:
        """The server's version and one PING's round trip in ms (`config check`); raises what
        the client raised when it does not answer."""
        with anyio.fail_after(self.timeout + self.connect_timeout):
            info = await self.client.info("server")
            started = time.perf_counter()
            await self.client.ping()
            elapsed = (time.perf_counter() - started) * 1000
        return str(info.get("redis_version", "?")), elapsed

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.timeout):
            await self.client.aclose(close_connection_pool=True)
            if self._bulk is not None:
                await self._bulk.aclose(close_connection_pool=True)


def _redis_errors() -> type[Exception]:
    from redis.exceptions import RedisError

    return RedisError


def _response_error() -> type[Exception]:
    from redis.exceptions import ResponseError

    return ResponseError


def _no_script() -> type[Exception]:
    from redis.exceptions import NoScriptError

    return NoScriptError


def shown_url(url: str) -> str:
    """A Redis URL as it may be printed or logged: without its user and password, wherever they
    are written (before the host, or as `?password=` / `?username=`)."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query)
    if "@" not in parts.netloc and not any(key in _SECRET_QUERY for key, _ in pairs):
        return url  # nothing to hide (and `unix:///path` keeps its form)
    query = urlencode([(key, "***" if key in _SECRET_QUERY else value) for key, value in pairs], safe="*")
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=query))


_SECRET_QUERY = frozenset({"password", "username"})


def seconds_until(end: float) -> int:
    """A key's expiry in whole seconds from now, at least 1."""
    return max(1, int(end - time.time()) + 1)
