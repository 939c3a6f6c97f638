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

from agentledger.runtime import Agent, Answer, ModelPlanner, QueueSink, Runtime, tool, user_message
from agentledger.storage import MemoryStore
from agentledger.testing import ScriptedModel, reply, tool_calls


@tool
async def weather(city: str) -> str:
    """The weather."""
    return f"{city}: 21C"


@tool(confirm=True)
async def book(city: str) -> str:
    """Book a trip (asks first)."""
    return f"booked {city}"


async def golden_records(store: Any = None) -> list[list[str]]:
    """Run the scripted run and return its records as ``[type, event_key, payload]``."""
    store = store if store is not None else MemoryStore()
    await store.create_session("golden", created_at=datetime(2026, 1, 1, tzinfo=UTC))
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Oslo"})),
            tool_calls(("c2", "weather", {"city": "Rome"}), ("c3", "weather", {"city": "Lima"})),
            reply("Warm everywhere."),
            tool_calls(("c4", "book", {"city": "Rome"})),
            reply("Booked."),
        ]
    )
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_model("m", model)
    agent = Agent("chat", ModelPlanner("m", system="Be brief."), tools=[weather, book])
    runtime.register_agent(agent)
    client = runtime.agent_client("chat")
    out = await client.run(
        "golden", [user_message("Weather?")], run_id="run-golden", turn_id="turn-golden"
    )
    assert out.text == "Warm everywhere.", out
    asked = await client.run("golden", "Book Rome", run_id="run-asks", turn_id="turn-asks")
    done = await client.resume("golden", "run-asks", Answer.approve(), run_id="run-approved")
    assert (asked.status, done.text) == ("suspended", "Booked."), (asked, done)
    rows = []
    for run_id in ("run-golden", "run-asks", "run-approved"):  # a confirmed call runs on resume
        page = await store.list_run_records(run_id, limit=1000)
        rows += [[r.type, r.event_key, r.payload.decode()] for r in page.records]
    return rows


if __name__ == "__main__":
    rows = asyncio.run(golden_records())
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
