"""Virtual time helpers for tests run with ``looptime``."""

from __future__ import annotations

import asyncio


async def advance(seconds: float) -> None:
    """Let ``seconds`` of loop time pass. Under looptime (this project's pytest setup) the
    loop clock jumps instead of waiting, so this costs no wall-clock time."""
    await asyncio.sleep(seconds)


def now() -> float:
    """The running loop's clock: the time every session decision is stamped with."""
    return asyncio.get_running_loop().time()
