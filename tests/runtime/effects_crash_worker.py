"""A worker process for the in-doubt crash test: its ``once`` tool counts, then hangs.

Usage: python -m tests.runtime.effects_crash_worker DB SESSION_ID RUN_ID COUNTER_FILE [parallel]

The tool adds one to the counter file (its side effect on the world, outside the
store), then sleeps until the test kills the process with SIGKILL. With
``parallel``, the model calls three tools at once: ``charge`` (once), ``quote``
(retry: returns at once, its result saved privately) and ``reserve`` (keyed: notes
its key and attempt in ``COUNTER_FILE.keys``, then hangs too).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agentledger.runtime import QueueSink, Tool, ToolContext, user_message
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import chat_runtime


def bump(counter: Path) -> None:
    """One more in the counter file, on disk before this returns."""
    done = int(counter.read_text()) if counter.exists() else 0
    with open(counter, "w") as f:
        f.write(str(done + 1))
        f.flush()
        os.fsync(f.fileno())


def count(counter: Path) -> int:
    """The counter file's value (0 before the first call)."""
    return int(counter.read_text() or 0) if counter.exists() else 0


def charge_tool(counter: Path, *, hang: bool) -> Tool:
    """The once tool ``charge``: one more in ``counter`` per call (then hangs if ``hang``)."""

    async def charge(cents: int) -> str:
        """Charges the card."""
        bump(counter)
        if hang:
            await asyncio.sleep(600)
        return f"charged {cents}"

    return Tool(charge, effect="once")


def step_tools(counter: Path, *, hang: bool) -> list[Tool]:
    """``charge`` (once), ``quote`` (retry; counts in ``COUNTER.quotes``) and ``reserve``
    (keyed; notes ``key attempt`` lines in ``COUNTER.keys``, hangs if ``hang``)."""

    async def quote() -> str:
        """A price."""
        bump(counter.with_suffix(".quotes"))
        return "5 EUR"

    async def reserve(ctx: ToolContext) -> str:
        """Reserves stock."""
        note(counter.with_suffix(".keys"), f"{ctx.idempotency_key} {ctx.attempt}")
        if hang:
            await asyncio.sleep(600)
        return "reserved"

    return [charge_tool(counter, hang=hang), Tool(quote), Tool(reserve, effect="keyed")]


def note(path: Path, line: str) -> None:
    """Append ``line`` to ``path``, on disk before this returns."""
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


PARALLEL = tool_calls(("k1", "charge", {"cents": 500}), ("k2", "quote", {}), ("k3", "reserve", {}))


async def main(path: str, session_id: str, run_id: str, counter: str, mode: str = "") -> None:
    store = await SQLiteStore.open(path)
    if mode == "parallel":
        model = ScriptedModel([PARALLEL, reply("never")])
        tools = step_tools(Path(counter), hang=True)
    else:
        model = ScriptedModel([tool_calls(("k1", "charge", {"cents": 500})), reply("never")])
        tools = [charge_tool(Path(counter), hang=True)]
    runtime = chat_runtime(store, model, tools=tools, stream=QueueSink())
    await runtime.agent_client("chat").run(session_id, [user_message("pay")], run_id=run_id)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
