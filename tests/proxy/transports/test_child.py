"""A child process over stdio, with small Python children: its stdout read and stdin written,
its stderr copied with its name and the last lines kept, and shutdown by stdin, SIGTERM, then
SIGKILL for a child that ignores both."""

from __future__ import annotations

import os
import sys

import anyio
import pytest

from frugal_proxy.transports.child import OFFER_LIMIT, ChildProcess, ChildStartError
from tests.pace import deadline

pytestmark = pytest.mark.anyio

ECHO = "import sys\nfor line in sys.stdin: sys.stdout.write(line.upper()); sys.stdout.flush()"
STUBBORN = (
    "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\nwhile True: time.sleep(1)"
)


async def spawn(code: str) -> ChildProcess:
    return await ChildProcess.spawn([sys.executable, "-c", code], "kid", {"KID": "1"})


async def test_what_is_written_comes_back_and_closing_stdin_ends_it() -> None:
    with deadline(10):
        child = await spawn(ECHO)
        await child.write(b"hello\n")
        assert await child.read() == b"HELLO\n"
        assert await child.terminate() == 0
    assert child.exit_reason() == "exited with status 0" and child.pid > 0


async def test_stderr_is_copied_with_the_name_and_its_tail_kept(capfd: pytest.CaptureFixture[str]) -> None:
    code = "import os, sys\nsys.stderr.write(f'one\\ntwo {os.environ[\"KID\"]}\\nno newline')\nsys.exit(3)"
    with deadline(10):
        child = await spawn(code)
        await child.pump_stderr()
        assert await child.wait() == 3
    assert list(child.stderr_tail) == ["one", "two 1", "no newline"]
    assert capfd.readouterr().err == "[kid] one\n[kid] two 1\n[kid] no newline\n"
    assert child.exit_reason() == "exited with status 3"


async def test_a_child_that_ignores_stdin_and_sigterm_is_killed() -> None:
    with deadline(10):
        child = await spawn(STUBBORN)
        assert await child.read() == b"ready\n"
        status = await child.terminate(grace=0.2)
    assert status == -9 and child.exit_reason() == "killed by SIGKILL"


async def test_a_command_that_cannot_start_says_which() -> None:
    with pytest.raises(ChildStartError, match="cannot start '/no/such/server'"):
        await ChildProcess.spawn(["/no/such/server"], "missing", {})


async def test_a_child_is_offered_bytes_at_once_until_too_many_wait() -> None:
    sleeper = "import sys, time\ntime.sleep(30)"  # never reads: what it is sent piles up
    with deadline(10):
        child = await spawn(sleeper)
        chunk = b"x" * (OFFER_LIMIT // 4)
        offered = [child.offer(chunk) for _ in range(40)]
        assert offered[0] == len(chunk) and 0 in offered  # taken at once, then refused: write() waits
        await child.close()
        assert child.offer(b"late\n") == 0
        with pytest.raises(anyio.ClosedResourceError):
            await child.write(b"late\n")
        child.kill()
        await child.wait()


async def test_a_write_to_a_child_that_has_exited_is_a_broken_resource() -> None:
    with deadline(10):
        child = await spawn("import sys\nsys.exit(0)")
        await child.wait()
        with pytest.raises(anyio.BrokenResourceError):
            for _ in range(50):  # the pipe's end is found closed on a write or the drain after it
                await child.write(b"x" * 65536)


async def test_messages_offered_in_one_turn_reach_the_child_in_order() -> None:
    with deadline(10):
        child = await spawn(ECHO)
        for n in range(50):
            assert child.offer(b"line %d\n" % n) > 0
        await child.write(b"end\n")  # what was held goes first
        received = b""
        while not received.endswith(b"END\n"):
            received += await child.read()
        assert received == b"".join(b"LINE %d\n" % n for n in range(50)) + b"END\n"
        assert await child.terminate() == 0


async def test_messages_held_for_a_turn_reach_the_child_together_and_in_order() -> None:
    with deadline(10):
        child = await spawn(ECHO)
        child.hold()  # the first message of the turn waits for the others
        for n in range(5):
            assert child.offer(b"line %d\n" % n) > 0
        received = b""
        while not received.endswith(b"LINE 4\n"):
            received += await child.read()
        assert received == b"".join(b"LINE %d\n" % n for n in range(5))
        assert await child.terminate() == 0


def open_fds() -> int | None:
    """How many descriptors this process has open (None where /proc does not say)."""
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None


async def test_the_childs_stdout_pipe_is_closed_once_read_to_its_end() -> None:
    """The child's stdout is a pipe this process reads itself: once the child has closed it and
    it is read to its end, our end is closed too (no descriptor is left behind per restart)."""
    before = open_fds()
    with deadline(10):
        child = await spawn("import sys\nsys.stdout.write('bye\\n')")
        assert await child.read() == b"bye\n"
        assert await child.read() == b""
        assert await child.read() == b""  # and again, without touching the closed descriptor
        await child.pump_stderr()
        assert await child.terminate() == 0
    if before is not None:
        for _ in range(50):  # the loop closes the other pipes' transports a turn or two later
            if (open_fds() or 0) <= before:
                break
            await anyio.sleep(0.02)
        assert (open_fds() or 0) <= before
