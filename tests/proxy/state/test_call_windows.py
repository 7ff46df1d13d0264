"""The in-memory call windows: a sliding window per key, bounded in keys and in times per key."""

from __future__ import annotations

import pytest

from frugal_proxy.state.call_windows import MemoryCallWindows

pytestmark = pytest.mark.anyio


async def test_times_slide_out_of_the_window() -> None:
    windows = MemoryCallWindows()
    assert await windows.note("k", 0.0, 60.0, 6) == [0.0]
    assert await windows.note("k", 30.0, 60.0, 6) == [0.0, 30.0]
    assert await windows.note("k", 60.0, 60.0, 6) == [30.0, 60.0]  # exactly 60 s old: gone


async def test_keys_and_times_are_bounded() -> None:
    windows = MemoryCallWindows(max_keys=2, max_times=3)
    for key in ("a", "b", "c"):
        await windows.note(key, 0.0, 60.0, 2)
    assert list(windows._seen) == ["b", "c"]  # the least recently seen went first
    for at in range(10):
        times = await windows.note("c", float(at), 60.0, 2)
    assert times == [7.0, 8.0, 9.0]
    assert len(await windows.note("d", 0.0, 60.0, 5)) == 1 and windows._seen["d"].maxlen == 5
