"""Mutations of valid JSON-RPC messages, for the fuzz tests and `bench/soak.py`.

A mutation takes a `random.Random` and one of the valid frames below and returns the bytes of
one line: the frame with a value's type swapped, a number out of any range, nesting too deep, a
string holding JSON nested deep, invalid UTF-8 or a lone surrogate, a NUL byte, a duplicate key,
the line cut short or made too long, a batch of 0, 1 or 1000 frames, a reply to an id nobody
sent. The tests draw the random generator, the frame and the mutation from hypothesis
(`batches()`), so that a failure shrinks to a few frames and replays; the soak script draws
them from a seeded `random.Random`.

Frames are encoded by `encode` below rather than by json, so that a mutation can put in a
literal no encoder would write (`Literal(b"1e999")`).
"""

from __future__ import annotations

import json
import queue
import random
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.pace import paced

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


@dataclass(frozen=True)
class Literal:
    """Bytes put into the encoded JSON as they are."""

    data: bytes


def encode(value: Any) -> bytes:
    """JSON for plain values, Literal bytes verbatim."""
    if isinstance(value, Literal):
        return value.data
    if isinstance(value, dict):
        return b"{" + b",".join(encode(str(key)) + b":" + encode(item) for key, item in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(encode(item) for item in value) + b"]"
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _call(ident: Any, name: str, arguments: Any, meta: bool = True) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = dict(MODERN_META)
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


# Valid messages of each kind a client (or an upstream) sends; the tools are the faulty
# server's harmless ones.
REQUESTS: list[dict[str, Any]] = [
    _call(1, "echo", {"text": "hello"}),
    _call("s-2", "echo", {"text": "café 東京 🌊"}, meta=False),
    {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": dict(MODERN_META)}},
    {"jsonrpc": "2.0", "id": 4, "method": "ping"},
    {"jsonrpc": "2.0", "id": 5, "method": "server/discover", "params": {"_meta": dict(MODERN_META)}},
    {"jsonrpc": "2.0", "id": 6, "method": "resources/list", "params": {"cursor": "abc"}},
    {"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "p", "arguments": {"a": "1"}}},
    {"jsonrpc": "2.0", "id": 8, "method": "x/unknown", "params": {"deep": {"list": [1, 2.5, None, True]}}},
]
NOTIFICATIONS: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "r"}},
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 9, "progress": 0.5}},
    {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
    {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": {"k": [1]}}},
]
REPLIES: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": 4242, "result": {}},  # an id nobody sent
    {"jsonrpc": "2.0", "id": "never", "result": {"content": [{"type": "text", "text": "x"}]}},
    {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "no", "data": [1, {"a": None}]}},
    {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}},
]
FRAMES = REQUESTS + NOTIFICATIONS + REPLIES
# What an upstream sends: replies to the call in flight (`{ID}`: its id, filled in by the faulty
# servers' `emit`), server requests, notifications, replies to ids it was never sent.
UPSTREAM_FRAMES: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": Literal(b"{ID}"), "result": {"content": [{"type": "text", "text": "early"}]}},
    {"jsonrpc": "2.0", "id": Literal(b"{ID}"), "error": {"code": -32000, "message": "refused"}},
    {"jsonrpc": "2.0", "id": 77, "method": "roots/list"},
    {"jsonrpc": "2.0", "id": 78, "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
    *NOTIFICATIONS,
    *REPLIES,
]

HUGE_NUMBERS = [
    b"1e999",
    b"-1e999",
    b"1E+400",
    b"9" * 5000,
    b"-" + b"9" * 4301,
    b"9" * 400 + b".5",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1e-400",
    b"-0",
    b"0.0000000000000000000000000001",
]
BAD_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80\x80"]
SURROGATES = [b'"\\ud800"', b'"\\udc00x"', b'"a\\ud83d"', b'"\\ud83d\\ud83d"']
OTHER_TYPES: list[Any] = [None, True, 0, -1, 1.5, "", "text", [], [1, "a"], {}, {"k": "v"}]
DEPTHS = [64, 127, 128, 129, 200, 500, 900, 1000, 3000]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a value where another value could go (the root excluded)."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.append((*prefix, key))
        found.extend(_paths(item, (*prefix, key)))
    return found


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _replace(rng: random.Random, frame: dict[str, Any], new: Any) -> dict[str, Any]:
    """The frame with one value somewhere in it (the envelope's fields included) replaced."""
    copied = _copy(frame)
    path = rng.choice(_paths(copied))
    target = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copied


def _nested(rng: random.Random) -> Literal:
    depth = rng.choice(DEPTHS)
    if rng.random() < 0.5:
        return Literal(b"[" * depth + b"1" + b"]" * depth)
    return Literal(b'{"a":' * depth + b"1" + b"}" * depth)


def swap_type(rng: random.Random, frame: dict[str, Any]) -> bytes:
    return encode(_replace(rng, frame, _copy(rng.choice(OTHER_TYPES))))


def huge_number(rng: random.Random, frame: dict[str, Any]) -> bytes:
    return encode(_replace(rng, frame, Literal(rng.choice(HUGE_NUMBERS))))


def deep_nesting(rng: random.Random, frame: dict[str, Any]) -> bytes:
    return encode(_replace(rng, frame, _nested(rng)))


def deep_text(rng: random.Random, frame: dict[str, Any]) -> bytes:
    """A string that is itself JSON nested deep (a tool's text result, say): valid at any depth."""
    return encode(_replace(rng, frame, bytes(_nested(rng).data).decode()))


def invalid_utf8(rng: random.Random, frame: dict[str, Any]) -> bytes:
    bad = rng.choice(BAD_UTF8)
    return encode(_replace(rng, frame, Literal(b'"a' + bad + b'b"')))


def lone_surrogate(rng: random.Random, frame: dict[str, Any]) -> bytes:
    return encode(_replace(rng, frame, Literal(rng.choice(SURROGATES))))


def nul_byte(rng: random.Random, frame: dict[str, Any]) -> bytes:
    line = encode(frame)
    if rng.random() < 0.5:
        return encode(_replace(rng, frame, Literal(b'"a\x00b"')))  # raw inside a string: not JSON
    position = rng.randrange(len(line) + 1)
    return line[:position] + b"\x00" + line[position:]


def truncated(rng: random.Random, frame: dict[str, Any]) -> bytes:
    line = encode(frame)
    return line[: rng.randrange(1, len(line))]


# What the fuzzed proxy is started with (`--max-message-bytes`): a batch of 1000 fits in it.
LINE_CAP = 256 * 1024


def over_long(rng: random.Random, frame: dict[str, Any]) -> bytes:
    """Longer than the proxy takes (LINE_CAP)."""
    return encode(_replace(rng, frame, "x" * (LINE_CAP + rng.randrange(1, 4096))))


def duplicate_keys(rng: random.Random, frame: dict[str, Any]) -> bytes:
    key = rng.choice(list(frame))
    other = encode(rng.choice([*OTHER_TYPES, Literal(b"1e999"), "tools/call", 99]))
    body = encode(frame)
    duplicate = encode(key) + b":" + other
    return body[:-1] + b"," + duplicate + b"}" if rng.random() < 0.5 else b"{" + duplicate + b"," + body[1:]


def batch(rng: random.Random, frame: dict[str, Any]) -> bytes:
    size = rng.choice([0, 1, 2, 1000])
    members = [rng.choice(FRAMES) for _ in range(size)]
    if members and rng.random() < 0.5:  # one member mutated, the rest valid
        members[rng.randrange(size)] = _replace(rng, members[0], Literal(rng.choice(HUGE_NUMBERS)))
    return encode(members)


def unknown_reply(rng: random.Random, frame: dict[str, Any]) -> bytes:
    ident: Any = rng.choice([rng.randrange(10**6, 10**9), f"nobody-{rng.randrange(10**6)}", -1, 0])
    body = rng.choice([{"result": {}}, {"error": {"code": -32603, "message": "late"}}, {"result": None}])
    return encode({"jsonrpc": "2.0", "id": ident, **body})


def garbage(rng: random.Random, frame: dict[str, Any]) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))).replace(b"\n", b" ")


MUTATIONS: dict[str, Callable[[random.Random, dict[str, Any]], bytes]] = {
    "swap_type": swap_type,
    "huge_number": huge_number,
    "deep_nesting": deep_nesting,
    "deep_text": deep_text,
    "invalid_utf8": invalid_utf8,
    "lone_surrogate": lone_surrogate,
    "nul_byte": nul_byte,
    "truncated": truncated,
    "over_long": over_long,
    "duplicate_keys": duplicate_keys,
    "batch": batch,
    "unknown_reply": unknown_reply,
    "garbage": garbage,
}


def mutant(rng: random.Random, frames: list[dict[str, Any]] = FRAMES) -> bytes:
    """One mutated line of a random kind and frame; never with a newline in it."""
    kind = rng.choice(list(MUTATIONS))
    return MUTATIONS[kind](rng, rng.choice(frames)).replace(b"\n", b" ")


def batches(
    frames: list[dict[str, Any]] = FRAMES, min_size: int = 10, max_size: int = 40
) -> st.SearchStrategy[list[bytes]]:
    """Lists of mutated lines, each drawn by hypothesis (kind, frame and the randomness inside)."""
    one = st.builds(
        lambda kind, frame, rng: MUTATIONS[kind](rng, frame).replace(b"\n", b" "),
        st.sampled_from(sorted(MUTATIONS)),
        st.sampled_from(frames),
        st.randoms(use_true_random=False),
    )
    return st.lists(one, min_size=min_size, max_size=max_size)


# -- a client of a proxy process over stdio, for the fuzz tests and the soak ----------------------


@dataclass
class LineClient:
    """A frugal-proxy process spoken to in lines: what it writes is collected by threads, and
    every line it writes must be JSON (`not_json` keeps the ones that are not)."""

    process: subprocess.Popen[bytes]
    replies: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    not_json: list[bytes] = field(default_factory=list)
    stderr: list[bytes] = field(default_factory=list)
    sent: int = 0
    probes: int = 0
    fuzzed: int = 0  # mutated lines, whichever side they came from
    readers: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, argv: list[str]) -> LineClient:
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        client = cls(process)
        client.readers = [
            threading.Thread(target=client._read_stdout, daemon=True),
            threading.Thread(target=client._read_stderr, daemon=True),
        ]
        for reader in client.readers:
            reader.start()
        return client

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.not_json.append(line[:200])
                continue
            for one in message if isinstance(message, list) else [message]:
                if isinstance(one, dict) and "method" not in one:
                    self.replies.put(one)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()
        self.sent += 1

    def reply_to(self, ident: Any, wait: float = 10.0) -> dict[str, Any]:
        """The reply with this id; AssertionError when none comes within `wait` seconds (a hang)."""
        wait = paced(wait)
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply to {ident!r} within {wait:g} s"
            assert self.process.poll() is None, f"the proxy exited with {self.process.returncode}"
            try:
                reply = self.replies.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if reply.get("id") == ident:
                return reply

    def call(self, ident: Any, name: str, arguments: dict[str, Any], meta: bool = True) -> dict[str, Any]:
        self.send(encode(_call(ident, name, arguments, meta)))
        return self.reply_to(ident)

    def probe(self) -> None:
        """A valid call that must still be answered, and by the upstream."""
        self.probes += 1
        ident = f"probe-{self.probes}"
        reply = self.call(ident, "echo", {"text": ident})
        assert reply["result"]["content"][0]["text"] == ident, reply
        assert not self.not_json, f"the proxy wrote lines that are not JSON: {self.not_json[:3]}"

    def initialize(self) -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}
        self.send(encode({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params}))
        self.reply_to("init", wait=30)
        self.send(encode({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def close(self, wait: float = 20.0) -> int:
        """Close stdin (the client goes away) and wait for the process; kill it if it lingers."""
        assert self.process.stdin is not None and self.process.stdout is not None and self.process.stderr is not None
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.process.wait(paced(wait))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(paced(5))
            raise
        finally:
            for reader in self.readers:
                reader.join(5)
            self.process.stdout.close()
            self.process.stderr.close()

    def stderr_text(self) -> str:
        return b"".join(self.stderr).decode("utf-8", "replace")
