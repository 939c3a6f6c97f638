"""Record the workflow histories that ``test_replay.py`` replays.

Run from the repository root after an intended change to the run loop or the
workflow (one that in-flight runs need not survive)::

    .venv/bin/python -m tests.engine.temporal.histories.regenerate

It starts its own dev server (or uses ``--temporal HOST:PORT``), runs each
scenario on a fresh SQLite store with a worker in this process, and writes
one JSON file per workflow next to this script: ``{"workflow_id",
"scenario", "history"}``. Check the files in: they are what proves that a
new worker can still replay runs started by the old one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from agentledger.engine.temporal import connect
from agentledger.errors import SessionNotFoundError
from agentledger.runtime import Agent, Runtime, user_message
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.engine.temporal.harness import now_ms, temporal_runtime
from tests.engine.temporal.server import TemporalDevServer
from tests.runtime.test_tool_loop import weather

HERE = Path(__file__).resolve().parent

Scenario = Callable[[Client, SQLiteStore, str], Awaitable[dict[str, str]]]
"""Runs one scenario in a session; returns ``{role: workflow id}`` of the workflows to keep."""


def _chat(model: ScriptedModel, tools: tuple[object, ...] = ()) -> Callable[[Runtime], None]:
    from agentledger.runtime import ModelPlanner

    def setup(runtime: Runtime) -> None:
        runtime.register_model("m", model)
        runtime.register_agent(Agent("chat", ModelPlanner("m", system="Be brief."), tools=tools))

    return setup


async def tool_loop(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Tokyo"})),
            reply("Paris 21C, Tokyo 21C."),
        ]
    )
    async with temporal_runtime(client, store, _chat(model, (weather,))) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
    return {"root": out.run_id}


async def one_tool(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Paris"})), reply("21C.")])
    async with temporal_runtime(client, store, _chat(model, (weather,))) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("Weather?")])
    return {"root": out.run_id}


async def child_run(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    from agentledger.runtime import ModelPlanner

    boss = ScriptedModel([tool_calls(("c1", "helper", {"request": "6*7?"})), reply("42.")])
    helper = ScriptedModel([reply("42")])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("boss", boss)
        runtime.register_model("helper", helper)
        runtime.register_agent(Agent("helper", ModelPlanner("helper")))
        runtime.register_agent(Agent("boss", ModelPlanner("boss"), agents=["helper"]))

    async with temporal_runtime(client, store, setup) as runtime:
        out = await runtime.agent_client("boss").run(session, [user_message("6*7?")])
    return {"parent": out.run_id, "child": f"{out.run_id}.c1"}


async def suspend_resume(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    from tests.engine.temporal.test_scenarios import AskFirst

    def setup(runtime: Runtime) -> None:
        runtime.register_agent(Agent("ask", AskFirst()))

    async with temporal_runtime(client, store, setup) as runtime:
        first = await runtime.agent_client("ask").run(session, [user_message("Weather?")])
        second = await runtime.agent_client("ask").resume(session, first.run_id, "Oslo")
    return {"suspended": first.run_id, "resumed": second.run_id}


async def _cancel(client: Client, store: SQLiteStore, session: str, *, reason: str) -> str:
    from tests.engine.temporal.test_scenarios import Gate, slow_chat

    gate = Gate()
    async with temporal_runtime(client, store, slow_chat(gate)) as runtime:
        handle = await runtime.agent_client("chat").start(session, [user_message("go")])
        await asyncio.wait_for(gate.started.wait(), 30)
        if reason:
            await handle.cancel(reason)
        else:
            await client.get_workflow_handle(handle.run_id).cancel()
        await handle.wait()
    return handle.run_id


async def cancel_with_reason(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    return {"root": await _cancel(client, store, session, reason="user pressed stop")}


async def engine_cancel(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    return {"root": await _cancel(client, store, session, reason="")}


async def ended_session(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    await store.end_session(session, ended_at=now_ms())
    async with temporal_runtime(client, store, _chat(ScriptedModel([]))) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    return {"root": out.run_id}


async def planner_failure(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    async with temporal_runtime(client, store, _chat(ScriptedModel([]))) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    return {"root": out.run_id}  # the script is empty: the model call fails


async def failed_start(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    async with temporal_runtime(client, store, _chat(ScriptedModel([]))) as runtime:
        handle = await runtime.agent_client("chat").start("no-such-session", [user_message("hi")])
        with contextlib.suppress(SessionNotFoundError):
            await handle.wait()
    return {"root": handle.run_id}


async def nested_suspension(client: Client, store: SQLiteStore, session: str) -> dict[str, str]:
    from agentledger.runtime import ModelPlanner
    from tests.runtime.test_nested import _Asker

    boss = ScriptedModel(
        [
            tool_calls(
                ("c1", "helper", {"request": "Where?"}), ("w1", "weather", {"city": "Oslo"})
            ),
            reply("Planned."),
        ]
    )

    def setup(runtime: Runtime) -> None:
        runtime.register_model("boss", boss)
        runtime.register_agent(Agent("helper", _Asker("Which city?")))
        runtime.register_agent(
            Agent("boss", ModelPlanner("boss"), tools=[weather], agents=["helper"])
        )

    async with temporal_runtime(client, store, setup) as runtime:
        first = await runtime.agent_client("boss").run(session, "Plan a trip")
        second = await runtime.agent_client("boss").resume(session, first.run_id, "Rome")
    return {
        "suspended_parent": first.run_id,
        "suspended_child": f"{first.run_id}.c1",
        "resumed_parent": second.run_id,
        "resumed_child": f"{second.run_id}.c1",
    }


SCENARIOS: dict[str, Scenario] = {
    "tool_loop": tool_loop,
    "one_tool": one_tool,
    "child_run": child_run,
    "suspend_resume": suspend_resume,
    "cancel_with_reason": cancel_with_reason,
    "engine_cancel": engine_cancel,
    "ended_session": ended_session,
    "planner_failure": planner_failure,
    "failed_start": failed_start,
    "nested_suspension": nested_suspension,
}


async def record(address: str, folder: Path) -> list[Path]:
    """Run every scenario against ``address`` and write its histories into ``folder``."""
    client = await connect(address)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = await SQLiteStore.open(Path(tmp) / "ledger.db")
        try:
            for name, scenario in SCENARIOS.items():
                session = f"s-{uuid.uuid4().hex[:12]}"
                await store.create_session(session, created_at=now_ms())
                for role, workflow_id in (await scenario(client, store, session)).items():
                    history = await client.get_workflow_handle(workflow_id).fetch_history()
                    path = folder / f"{name}__{role}.json"
                    document = {
                        "scenario": name,
                        "workflow_id": workflow_id,
                        "history": history.to_json_dict(),
                    }
                    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
                    written.append(path)
        finally:
            await store.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temporal", default="", metavar="HOST:PORT")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    server = None if args.temporal else TemporalDevServer()
    address = args.temporal or (server.start() if server else "")
    try:
        for old in args.out.glob("*.json"):
            old.unlink()
        for path in asyncio.run(record(address, args.out)):
            print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
