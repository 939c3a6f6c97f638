"""The churn the concurrency tests run, in threads and in spawned processes.

Kept apart from the test modules so a spawned interpreter imports only this and
the package (not the Agents SDK, whose import alone costs seconds).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentledger.contrib.openai_agents import MemorySession
from agentledger.memory import SQLiteMemory

# ------------------------------------------------------------------ concurrent churn


async def churn(session: MemorySession, writer: int, rounds: int) -> list[Any]:
    """Add two items and pop one per round; returns what was popped."""
    popped: list[Any] = []
    for i in range(rounds):
        await session.add_items([{"w": writer, "i": 2 * i}, {"w": writer, "i": 2 * i + 1}])
        await asyncio.sleep(0.001)  # let the other writers in between our calls
        popped.append(await session.pop_item())
    return popped


async def _churn_on(
    backend: str, where: str, session_id: str, writer: int, rounds: int, start: Any
) -> Any:
    if backend == "sqlite":
        memory: Any = await SQLiteMemory.open(where)
    else:
        from agentledger.memory.postgres import PostgresMemory

        memory = await PostgresMemory.open(where)
    try:
        start.wait()  # every writer is ready: release them together
        return await churn(MemorySession(session_id, memory), writer, rounds)
    finally:
        await memory.close()


def churn_in_process(
    backend: str, where: str, session_id: str, writer: int, rounds: int, start: Any, results: Any
) -> None:
    """Process entry point: churn on a backend opened here; put (writer, popped) on ``results``."""
    try:
        outcome = asyncio.run(_churn_on(backend, where, session_id, writer, rounds, start))
        results.put((writer, outcome))
    except BaseException as e:  # report, never hang the parent
        results.put((writer, repr(e)))


def churn_in_thread(
    opener: Callable[[], Any], session_id: str, writer: int, rounds: int, start: Any
) -> Any:
    """Thread entry point: its own event loop, churning on the memory ``opener`` gives."""

    async def main() -> Any:
        memory, close = await opener()
        try:
            start.wait()
            return await churn(MemorySession(session_id, memory), writer, rounds)
        finally:
            await close()

    return asyncio.run(main())
