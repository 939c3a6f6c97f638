"""[D5] [V6] prompt_versions of runs made on the Temporal engine: an agent tool's child,
a next turn and a fork, on SQLite and PostgreSQL."""

from __future__ import annotations

from temporalio.client import Client

from agentledger.runtime import (
    Agent,
    ModelPlanner,
    PromptUse,
    PromptVersion,
    Runtime,
    prompt_versions,
)
from agentledger.storage import RunStatus, Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import temporal_runtime
from tests.runtime.support import records


async def _prompt_record(store: Store, run_id: str) -> str:
    return next(r.id for r in await records(store, run_id) if r.type == "prompt_rendered")


async def test_child_next_turn_and_fork_on_temporal(
    temporal_client: Client, store: Store, session: str
) -> None:
    boss = ScriptedModel(
        [
            tool_calls(("d1", "research", {"request": "Eiffel Tower?"})),
            reply("Built in 1889."),
            reply("Yes, 1889."),
            reply("The Louvre: 1793."),
        ]
    )

    def setup(runtime: Runtime) -> None:
        runtime.register_model("boss", boss)
        runtime.register_model("helper", ScriptedModel([reply("1889.")]))
        helper = ModelPlanner("helper", system="Research.", prompt_version="7")
        runtime.register_agent(Agent("research", helper, description="Looks things up."))
        runtime.register_agent(
            Agent("chat", ModelPlanner("boss", prompt_version="3"), agents=["research"])
        )

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        client = runtime.agent_client("chat")
        first = await client.run(session, "When was it built?")
        second = await client.run(session, "Sure?", after=first.run_id)
        fork = await client.fork(first.run_id, "And the Louvre?")
    for out in (first, second, fork):
        assert out.status is RunStatus.COMPLETED, out.failure
    child = f"{first.run_id}.d1"
    research = PromptVersion(
        prompt_id="research.system",
        version="7",
        uses=(PromptUse(run_id=child, record_id=await _prompt_record(store, child), via="child"),),
    )
    for later in (second, fork):
        assert await prompt_versions(store, later.run_id) == (
            PromptVersion(
                prompt_id="chat.system",
                version="3",
                uses=(
                    PromptUse(
                        run_id=later.run_id,
                        record_id=await _prompt_record(store, later.run_id),
                        via="own",
                    ),
                    PromptUse(
                        run_id=first.run_id,
                        record_id=await _prompt_record(store, first.run_id),
                        via="history",
                    ),
                ),
            ),
            research,
        )
