"""The stream's order, checked against the store's commit order; a session that exercises it.

Shared by the in-process runtime tests and the Temporal engine tests: the
same agents (:func:`setup_family`) run the same turns (:func:`drive_family`)
on either engine, and :func:`assert_stream_in_commit_order` checks what the
stream delivered against what the store committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentledger.runtime import Agent, Answer, ModelPlanner, Runtime, events, tool
from agentledger.storage import Record, RunStatus
from agentledger.testing import ScriptedModel, reply, tool_calls

__all__ = ["assert_stream_in_commit_order", "drive_family", "setup_family"]


async def _session_records(store: Any, session_id: str) -> list[Record]:
    """Every record of the session's runs, in the order the store committed them [L9]."""
    out: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_session_run_records(session_id, cursor=cursor, limit=1000)
        out.extend(page.records)
        if not page.next_cursor:
            return out
        cursor = page.next_cursor


def _opening(turn: int) -> tuple[str, str]:
    """The event keys a planner turn opens with (its phase record, written before the model)."""
    return (f"turn:{turn}:phase:planning", f"turn:{turn}:phase:synthesizing")


def _first_difference(recorded: Sequence[str], expected: Sequence[str]) -> str:
    """Where the stream's order leaves the store's: both lists around the first difference."""
    at = next(
        (i for i, (a, b) in enumerate(zip(recorded, expected, strict=False)) if a != b),
        min(len(recorded), len(expected)),
    )
    lo, hi = max(0, at - 5), at + 6
    return (
        "recorded events must reach the stream in commit order; first difference at "
        f"{at} (stream has {len(recorded)}, store {len(expected)})\n"
        f"  stream[{lo}:{hi}]: {list(recorded[lo:hi])}\n"
        f"  store [{lo}:{hi}]: {list(expected[lo:hi])}"
    )


async def assert_stream_in_commit_order(
    store: Any, published: Sequence[events.RunEvent], session_id: str
) -> None:
    """The events of recorded things arrived in commit order, and each turn's model
    deltas arrived after everything recorded before the turn's model call began.

    For a delta of turn N of run R: after the record that opened turn N (its
    ``planning`` or ``synthesizing`` phase, and so after every record the
    session committed before it), and before R's next record.
    """
    committed = await _session_records(store, session_id)
    expected = [
        f"{r.run_id}/{r.event_key}" for r in committed if events.event_from_record(r) is not None
    ]
    recorded = [e.key for e in published if not isinstance(e, events.ModelDelta)]
    assert recorded == expected, _first_difference(recorded, expected)
    where = {e.key: i for i, e in enumerate(published)}
    by_run: dict[str, list[str]] = {}
    for r in committed:
        by_run.setdefault(r.run_id, []).append(r.event_key)
    deltas = [(i, e) for i, e in enumerate(published) if isinstance(e, events.ModelDelta)]
    assert deltas, "the scenario streams model output"
    for i, delta in deltas:
        keys = by_run[delta.run_id]
        opening = next(n for n, k in enumerate(keys) if k in _opening(delta.turn))
        opened = where[f"{delta.run_id}/{keys[opening]}"]
        assert opened < i, (
            f"delta {delta.key} arrived before {keys[opening]}, recorded before its turn began"
        )
        if opening + 1 < len(keys):
            after = where[f"{delta.run_id}/{keys[opening + 1]}"]
            assert i < after, f"delta {delta.key} arrived after {keys[opening + 1]}"


@tool
async def weather(city: str) -> dict[str, Any]:
    """Today's weather in a city."""
    await asyncio.sleep(0.01)
    return {"city": city, "temp": 21}


@tool(confirm=True)
async def book_table(restaurant: str, people: int) -> str:
    """Book a table (asks the user first)."""
    return f"booked {restaurant} for {people}"


def setup_family(runtime: Runtime) -> None:
    """A concierge ``chat`` that calls tools and three agents (one of which books)."""
    boss = ScriptedModel(
        [
            tool_calls(
                ("c1", "weather", {"city": "Paris"}),
                ("c2", "weather", {"city": "Tokyo"}),
                ("d1", "research", {"request": "When was the Eiffel Tower built?"}),
                ("d2", "critic", {"request": "Is Paris nice in May?"}),
                text="Checking four things at once.",
            ),
            reply("Paris and Tokyo are mild; the tower is from 1889; May is lovely."),
            tool_calls(
                ("b1", "book_table", {"restaurant": "Chez Nous", "people": 2}), text="Book it?"
            ),
            reply("Done: Chez Nous is booked for two."),
            tool_calls(("d3", "booker", {"request": "Book Le Train Bleu for 4"}), text="Asking."),
            reply("The booker booked Le Train Bleu for four."),
        ],
        chunk=5,
    )
    runtime.register_model("boss", boss)
    runtime.register_model("research", ScriptedModel([reply("Built from 1887 to 1889.")], chunk=6))
    runtime.register_model("critic", ScriptedModel([reply("Yes, May is mild and green.")], chunk=6))
    runtime.register_model(
        "booker",
        ScriptedModel(
            [
                tool_calls(
                    ("b2", "book_table", {"restaurant": "Le Train Bleu", "people": 4}),
                    text="Shall I book it?",
                ),
                reply("Booked Le Train Bleu."),
            ],
            chunk=4,
        ),
    )
    runtime.register_agent(Agent("research", ModelPlanner("research"), description="Researches."))
    runtime.register_agent(Agent("critic", ModelPlanner("critic"), description="Judges."))
    runtime.register_agent(
        Agent("booker", ModelPlanner("booker"), tools=[book_table], description="Books tables.")
    )
    runtime.register_agent(
        Agent(
            "chat",
            ModelPlanner("boss", system="Be brief.", stream=True),
            tools=[weather, book_table],
            agents=["research", "critic", "booker"],
        )
    )


async def drive_family(runtime: Runtime, session_id: str) -> None:
    """Three turns: parallel tools and children; a confirmation; a child that asks first."""
    client = runtime.agent_client("chat")
    first = await client.run(session_id, "Weather, history and advice?")
    assert first.status is RunStatus.COMPLETED, first.failure
    asked = await client.run(session_id, "Book Chez Nous for 2.")
    assert asked.status is RunStatus.SUSPENDED
    booked = await client.resume(session_id, asked.run_id, Answer.approve("Yes, book it."))
    assert booked.status is RunStatus.COMPLETED, booked.failure
    waiting = await client.run(session_id, "Have the booker book Le Train Bleu.")
    assert waiting.status is RunStatus.SUSPENDED
    done = await client.resume(session_id, waiting.run_id, Answer.approve("Go ahead."))
    assert done.status is RunStatus.COMPLETED, done.failure
    assert done.text == "The booker booked Le Train Bleu for four."
