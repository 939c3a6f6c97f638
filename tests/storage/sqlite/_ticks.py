"""Whether the event loop stayed free: a sleeper task that counts its turns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass
class Ticks:
    """Turns the sleeper got; a loop held by a blocking call gives it none."""

    count: int = 0


@contextlib.asynccontextmanager
async def loop_ticks(every: float = 0.01) -> AsyncIterator[Ticks]:
    """Count, while inside, how often a task sleeping ``every`` seconds gets to run."""
    ticks = Ticks()

    async def tick() -> None:
        while True:
            await asyncio.sleep(every)
            ticks.count += 1

    ticker = asyncio.ensure_future(tick())
    try:
        yield ticks
    finally:
        ticker.cancel()
