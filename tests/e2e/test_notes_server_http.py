"""`notes_server.py --http HOST:PORT`: the example server over the SDK's own Streamable HTTP, in
both eras (the HTTP benchmark's direct column), and its refusal of a malformed address."""

from __future__ import annotations

import subprocess

import anyio
import anyio.abc
import pytest
from mcp import Client

from tests.conftest import notes_command, reserved_port
from tests.pace import deadline, paced

pytestmark = pytest.mark.anyio


async def _wait_listening(process: anyio.abc.Process, port: int) -> None:
    while True:
        assert process.returncode is None, f"notes_server.py --http exited with status {process.returncode}"
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(0.1)
            continue
        await stream.aclose()
        return


async def test_notes_server_answers_both_eras_over_http(mode: str) -> None:
    with reserved_port() as port:  # no other test's server gets it before the notes server binds it
        command = [*notes_command(), "--http", f"127.0.0.1:{port}"]
        async with await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL) as process:
            try:
                with deadline(40):
                    await _wait_listening(process, port)
                    async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
                        result = await client.call_tool("add", {"a": 2, "b": 3})
                        names = {tool.name for tool in (await client.list_tools()).tools}
                assert not result.is_error
                assert result.structured_content == {"result": 5}
                assert {"add", "echo", "blob"} <= names
            finally:
                process.terminate()
                with deadline(15):
                    await process.wait()


@pytest.mark.parametrize("argv", [["--http"], ["--http", "8000"], ["--http", "127.0.0.1:port"], ["--stdio"]])
def test_notes_server_refuses_a_malformed_http_address(argv: list[str]) -> None:
    done = subprocess.run([*notes_command(), *argv], stdin=subprocess.DEVNULL, capture_output=True, timeout=paced(40))
    assert done.returncode != 0
    assert b"notes_server.py" in done.stderr
    assert b"HOST:PORT" in done.stderr
