"""The live stream follows the store: recorded events in commit order, deltas after their past."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agentledger.memory import SQLiteMemory
from agentledger.runtime import QueueSink, Runtime, events
from agentledger.testing import ScriptedModel, reply, tool_calls
from tests.runtime.ordering import assert_stream_in_commit_order, drive_family, setup_family
from tests.runtime.support import AnyStore, chat_runtime
from tests.runtime.test_tool_loop import weather


async def test_a_turns_deltas_follow_the_parallel_results_it_answers(
    store: AnyStore, session: str
) -> None:
    """The model deltas of the turn after two parallel calls reach the stream after both
    tool_result_received events and the results message, not before them."""
    sink = QueueSink()
    model = ScriptedModel(
        [
            tool_calls(("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Oslo"})),
            reply("Both are mild."),
        ],
        chunk=3,
    )
    runtime = chat_runtime(store, model, tools=[weather], stream=sink)
    out = await runtime.agent_client("chat").run(session, "Weather?")
    published = sink.for_run(out.run_id)
    kinds = [type(e).__name__ for e in published]
    answer = next(
        i for i, e in enumerate(published) if isinstance(e, events.ModelDelta) and e.turn == 2
    )
    assert kinds.count("ToolResultReceived") == 2
    assert kinds.index("ToolResultReceived") < answer
    assert max(i for i, k in enumerate(kinds) if k == "ToolResultReceived") < answer
    await assert_stream_in_commit_order(store, sink.events, session)


async def test_stream_follows_commit_order_with_children_and_suspensions(
    store: AnyStore, session: str, tmp_path: Path
) -> None:
    """Parallel tools and child runs, a confirmation and a child that suspends its parent:
    every recorded event reaches the stream in the session's commit order, and each
    turn's deltas come after everything recorded before the turn (product memory on)."""
    sink = QueueSink()
    memory = await SQLiteMemory.open(tmp_path / "memory.db")
    try:
        runtime = Runtime(store, stream=sink, memory=memory)
        setup_family(runtime)
        await drive_family(runtime, session)
    finally:
        await memory.close()
    await assert_stream_in_commit_order(store, sink.events, session)


def test_the_offline_demo_prints_results_before_the_answers_built_on_them(
    tmp_path: Path,
) -> None:
    """`agentledger demo` (offline model) prints each tool or child result before the
    answer that uses it, and each answer once."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTLEDGER_", "AWS_", "ANTHROPIC_", "OPENAI_"))
    }
    env["COLUMNS"] = "300"  # one line per printed event
    done = subprocess.run(
        [sys.executable, "-m", "agentledger", "--db", str(tmp_path / "demo.db"), "demo"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    weather = "concierge: Paris: 18°C, light rain. Tokyo: 24°C, sunny."
    assert out.count(weather) == 1
    assert out.index("← get_weather: {'city': 'Paris'") < out.index(weather)
    assert out.index("← get_weather: {'city': 'Tokyo'") < out.index(weather)
    research = "concierge: From the research agent:"
    assert out.count(research) == 1
    assert out.index("← research:") < out.index(research)
    booked = "concierge: Done: table for 2"
    assert out.count(booked) == 1
    assert out.index("← book_table:") < out.index(booked)
