"""A worker process for the crash test: runs one run whose tool sleeps, until killed.

Usage: python -m tests.runtime.crash_worker DB SESSION_ID RUN_ID
"""

from __future__ import annotations

import asyncio
import sys

from agentledger.runtime import QueueSink, tool, user_message
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.support import chat_runtime


@tool
async def sleepy(seconds: int) -> str:
    """Sleeps; the test kills the process meanwhile."""
    await asyncio.sleep(seconds)
    return "woke up"


async def main(path: str, session_id: str, run_id: str) -> None:
    store = await SQLiteStore.open(path)
    model = ScriptedModel([tool_calls(("z1", "sleepy", {"seconds": 600})), reply("never")])
    runtime = chat_runtime(store, model, tools=[sleepy], stream=QueueSink())
    await runtime.agent_client("chat").run(session_id, [user_message("sleep")], run_id=run_id)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
