"""Waiting for a condition, never for a time: the tests' polling helper.

A test that needs something to have happened (a thread's checkpoint, an event loop's
turns, an operation reaching a queue) polls for it here. The deadline only guards against a
hang; it is generous enough for a loaded machine and is never a measurement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["HANG_GUARD", "until"]

HANG_GUARD = 60.0
"""Seconds a test waits for a condition before it calls the wait a hang."""


async def until(condition: Callable[[], bool], what: str, within: float = HANG_GUARD) -> None:
    """Return once ``condition()`` holds, checking it on every turn of a 10 ms sleep; an
    ``AssertionError`` naming ``what`` if it still does not hold after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {within} s")
        await asyncio.sleep(0.01)
