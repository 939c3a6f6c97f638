"""A scripted run of ``retry`` tools whose records are pinned byte for byte.

``python -m tests.runtime.golden_run OUT.json`` writes the run's records (type, event
key, payload) as JSON; ``tests/runtime/data/retry_run_golden.json`` was written this
way by the code before tool effects existed, so a retry-only run must still write
exactly those bytes (an exact retry across an upgrade stays exact).
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

from agentledger.runtime import Agent, ModelPlanner, QueueSink, Runtime, tool, user_message
from agentledger.storage import MemoryStore
from agentledger.testing import ScriptedModel, reply, tool_calls


@tool
async def weather(city: str) -> str:
    """The weather."""
    return f"{city}: 21C"


async def golden_records(store: Any = None) -> list[list[str]]:
    """Run the scripted run and return its records as ``[type, event_key, payload]``."""
    store = store if store is not None else MemoryStore()
    await store.create_session("golden", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Oslo"})),
            tool_calls(("c2", "weather", {"city": "Rome"}), ("c3", "weather", {"city": "Lima"})),
            reply("Warm everywhere."),
        ]
    )
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", model)
    runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=[weather]))
    out = await runtime.agent_client("chat").run(
        "golden", [user_message("Weather?")], run_id="run-golden", turn_id="turn-golden"
    )
    assert out.text == "Warm everywhere.", out
    page = await store.list_run_records("run-golden", limit=1000)
    return [[r.type, r.event_key, r.payload.decode()] for r in page.records]


if __name__ == "__main__":
    rows = asyncio.run(golden_records())
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
