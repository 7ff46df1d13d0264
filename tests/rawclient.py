"""A raw JSON-RPC client over a child's stdio, for tests that must send what no SDK would."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import anyio
import anyio.abc

from tests.pace import deadline

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


class RawClient:
    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self._buffer = b""
        self.stderr = bytearray()

    @classmethod
    async def start(cls, tg: anyio.abc.TaskGroup, command: list[str], env: dict[str, str] | None = None) -> RawClient:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        client = cls(process)
        tg.start_soon(client._collect_stderr)
        return client

    async def _collect_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr.extend(chunk)

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(line + b"\n")

    async def send(self, message: Any) -> None:
        await self.send_line(json.dumps(message).encode())

    async def receive(self, wait: float = 10) -> Any:
        assert self.process.stdout is not None
        with deadline(wait):
            while b"\n" not in self._buffer:
                self._buffer += await self.process.stdout.receive()
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    async def request(self, ident: int, method: str, params: Any = None, wait: float = 10) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        while True:
            reply = await self.receive(wait)
            if reply.get("id") == ident and "method" not in reply:
                return reply

    async def initialize(self, capabilities: dict[str, Any] | None = None, wait: float = 10) -> Any:
        reply = await self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
            wait,
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    async def close(self) -> int:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()
        with deadline(15):
            return await self.process.wait()

    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")
