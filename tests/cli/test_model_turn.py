"""``agentledger transcript RUN --model-input --turn N [--provider-request P]``: a planner
turn as the model saw it, rebuilt from the log, a history policy's cut shown as cut."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentledger.providers import anthropic
from agentledger.providers.model import ModelRequest
from agentledger.runtime import Agent, LastTurns, ModelPlanner, QueueSink, Runtime, tool
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import decode_messages
from agentledger.views.model_view import PROVIDERS
from tests.cli.conftest import run_cli
from tests.runtime.support import now_ms


@tool
async def weather(city: str) -> str:
    """The weather."""
    return f"{city}: 21C"


async def _two_runs(db: Path) -> tuple[str, str, list[ModelRequest]]:
    store = await SQLiteStore.open(db, durability="normal")
    try:
        await store.create_session("s", created_at=now_ms())
        model = ScriptedModel(
            [reply("first answer"), tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Mild.")]
        )
        runtime = Runtime(store, stream=QueueSink())
        runtime.register_model("m", model)
        planner = ModelPlanner("m", system="Be brief.", model="model-x")
        agent = Agent("chat", planner, tools=[weather], history=LastTurns(1))
        runtime.register_agent(agent)
        client = runtime.agent_client("chat")
        one = await client.run("s", "question one")
        two = await client.run("s", "Weather in Oslo?", after=one.run_id)
        return one.run_id, two.run_id, model.requests
    finally:
        await store.close()


def test_a_turn_as_the_model_saw_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    one, two, requests = asyncio.run(_two_runs(db))
    done = run_cli("--db", str(db), "transcript", "--model-input", "--turn", "1", two)
    assert done.code == 0, done.err
    out = done.out
    assert f"turn 1 of run {two} (planning)" in out
    assert "== request to model-x" in out
    assert "   | Be brief." in out
    assert "history policy last_turns:1" in out
    assert "not in the run log: tool definitions" in out
    assert "→ weather(" in out  # the answer
    assert "stop reason: tool_use" in out
    assert f"== changes since {one} turn 1's request" in out
    cut = out[out.index("cut by last_turns:1") :]
    assert "question one" in cut  # what the policy cut, with where it is stored
    assert f"({one} record" in cut
    request = out[: out.index("== response")]
    assert "question one" not in request  # not sent

    second = run_cli("--db", str(db), "--json", "transcript", "--model-input", "--turn", "2", two)
    assert second.code == 0, second.err
    view = json.loads(second.out)
    sent = decode_messages(json.dumps(view["request"]["messages"]).encode())
    assert sent == [m for m in requests[2].messages if m.role != "system"]
    assert [a["run_id"] for a in view["diff"]["added"]] == [two, two]
    assert view["diff"]["cut"] == []
    assert view["response"]["stop_reason"] == "end_turn"

    body = run_cli(
        "--db", str(db), "transcript", "--model-input", "--turn", "2",
        "--provider-request", "anthropic", two,
    )  # fmt: skip
    assert body.code == 0, body.err
    asked = requests[2]
    expected = anthropic.encode(asked.messages, (), {"model": "model-x"})
    assert json.loads(body.out) == json.loads(json.dumps(expected))
    assert "not in the run log, so not in this request: tool definitions" in body.err


def test_bad_flags_and_turns_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _, two, _ = asyncio.run(_two_runs(db))
    absent = run_cli("--db", str(db), "transcript", "--model-input", "--turn", "9", two)
    assert absent.code != 0
    assert "its turns: 1, 2" in absent.err
    alone = run_cli("--db", str(db), "transcript", "--turn", "1", two)
    assert alone.code == 2
    assert "--turn goes with --model-input" in alone.err
    provider = run_cli("--db", str(db), "transcript", "--provider-request", "anthropic", two)
    assert provider.code == 2
    unknown = run_cli(
        "--db", str(db), "transcript", "--model-input", "--turn", "1",
        "--provider-request", "gemini", two,
    )  # fmt: skip
    assert unknown.code == 2


def test_the_cli_names_every_provider_the_view_encodes() -> None:
    from agentledger.cli.transcript import PROVIDERS as NAMED

    assert NAMED == PROVIDERS
