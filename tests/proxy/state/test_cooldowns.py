"""The in-memory cooldown book: a later fence is kept, a lift clears it."""

from __future__ import annotations

import pytest

from frugal_proxy.state.cooldowns import MemoryCooldowns


@pytest.mark.anyio
async def test_the_later_fence_is_kept_and_a_lift_clears_it() -> None:
    book = MemoryCooldowns()
    assert book.until("a") is None
    await book.fence("a", 100.0)
    await book.fence("a", 50.0)
    assert book.until("a") == 100.0
    await book.fence("a", 150.0)
    assert book.until("a") == 150.0
    await book.lift("a")
    await book.lift("never-fenced")
    assert book.until("a") is None
