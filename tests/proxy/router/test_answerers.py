"""The stdio router's answering machinery: reused answer tasks, and one timer for every plain
call's deadline."""

from __future__ import annotations

import anyio
import pytest

from frugal_proxy.protocol import jsonrpc
from frugal_proxy.records import Exchange
from frugal_proxy.router.answerers import Answerers, Deadlines
from tests.pace import deadline

pytestmark = pytest.mark.anyio


class Call:
    def __init__(self, name: str, expired: list[str]) -> None:
        self.name = name
        self.due = 0.0
        self._expired = expired

    def expire(self) -> None:
        self._expired.append(self.name)


async def test_deadlines_run_out_in_order_and_an_unwatched_call_never_expires() -> None:
    expired: list[str] = []
    deadlines = Deadlines()
    first, second, third = Call("first", expired), Call("second", expired), Call("third", expired)
    with deadline(5):
        deadlines.watch(first, 0.05)
        deadlines.watch(second, 0.10)
        deadlines.watch(third, 0.15)
        deadlines.unwatch(second)  # answered in time
        await anyio.sleep(0.3)
    assert expired == ["first", "third"]


class Failing(Call):
    def expire(self) -> None:
        super().expire()
        raise RuntimeError("the task group is closed")


async def test_a_call_whose_expiry_fails_does_not_keep_the_later_ones_from_running_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    expired: list[str] = []
    deadlines = Deadlines()
    with deadline(5):
        deadlines.watch(Failing("failing", expired), 0.05)
        deadlines.watch(Call("same moment", expired), 0.05)
        deadlines.watch(Call("later", expired), 0.10)
        await anyio.sleep(0.3)
    assert expired == ["failing", "same moment", "later"]
    assert "could not be answered" in caplog.text


async def test_every_request_is_answered_and_idle_tasks_are_reused_up_to_the_limit() -> None:
    answered: list[int] = []
    release = anyio.Event()

    async def answer(frame: jsonrpc.Frame, resume: Exchange | None) -> None:
        ident = jsonrpc.id_of(frame)
        assert isinstance(ident, int)
        if ident < 3:
            await release.wait()  # three requests in flight at once: three tasks
        answered.append(ident)

    with deadline(5):
        async with anyio.create_task_group() as tg:
            answerers = Answerers(tg, answer)
            for ident in range(3):
                answerers.submit(jsonrpc.request(ident, "ping"))
            await anyio.wait_all_tasks_blocked()
            release.set()
            await anyio.wait_all_tasks_blocked()
            assert sorted(answered) == [0, 1, 2] and len(answerers._idle) == 3  # waiting for more
            for ident in range(3, 6):
                answerers.submit(jsonrpc.request(ident, "ping"))  # handed to the waiting tasks
            await anyio.wait_all_tasks_blocked()
            assert sorted(answered) == [0, 1, 2, 3, 4, 5] and len(answerers._idle) == 3
            answerers.close()  # the waiting tasks end: the task group can exit
    assert len(answered) == 6
