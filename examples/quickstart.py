"""Quick start: an agent with one tool; every step recorded in SQLite (quickstart.db)."""

import asyncio
from datetime import UTC, datetime

from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather in a city."""
    return {"city": city, "temp_c": 18, "conditions": "light rain"}


async def main() -> None:
    store = await SQLiteStore.open("quickstart.db")
    runtime = Runtime(store)
    # Any ModelClient fits here; ScriptedModel replays two answers, so this runs offline.
    model = ScriptedModel(
        [tool_calls(("call_1", "get_weather", {"city": "Paris"})), reply("18°C and rainy.")]
    )
    runtime.register_model("model", model)
    planner = ModelPlanner("model", system="Answer with the tools you have.")
    runtime.register_agent(Agent("weather", planner, tools=[get_weather]))
    await store.create_session("quickstart", created_at=datetime.now(UTC).replace(microsecond=0))
    out = await runtime.agent_client("weather").run("quickstart", [user_message("Paris?")])
    print(out.status, out.text, out.run_id)
    await store.close()


asyncio.run(main())
