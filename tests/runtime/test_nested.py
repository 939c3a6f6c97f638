"""End to end: a child run that asks for input suspends its parent; resume answers it.

DESIGN section 5 and [K1]-[K3]: ``resume`` on the parent continues the child
(under the parent's continuation), then the parent; every run in the chain
keeps a valid transcript.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentledger.errors import ValidationError
from agentledger.runtime import (
    Agent,
    Answer,
    AwaitClarification,
    ModelPlanner,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    QueueSink,
    Runtime,
    events,
    tool,
)
from agentledger.storage import RunStatus, payloads
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import TextPart, ToolResultPart
from tests.runtime.support import AnyStore, records, types, valid_transcript

booked: list[str] = []


@tool(confirm=True)
async def book(restaurant: str) -> str:
    """Book a table (needs the user's confirmation)."""
    booked.append(restaurant)
    return f"booked {restaurant}"


@tool
async def weather(city: str) -> str:
    """Today's weather."""
    return f"sunny in {city}"


class _Asker:
    """Asks ``questions`` one after the other, then answers with every reply."""

    def __init__(self, *questions: str) -> None:
        self.questions = questions

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult(await_=AwaitClarification(question=self.questions[0]))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        messages = await input.prepare_messages()
        replies = [
            m.parts[0].text
            for m in messages[1:]
            if m.role == "user" and isinstance(m.parts[0], TextPart)
        ]
        if len(replies) < len(self.questions):
            return PlanResult(await_=AwaitClarification(question=self.questions[len(replies)]))
        return PlanResult.answer("You said " + " and ".join(replies) + ".")


def _runtime(store: AnyStore, sink: QueueSink, boss: list[Any], child: Any) -> Runtime:
    runtime = Runtime(store, stream=sink)
    runtime.register_model("boss", ScriptedModel(boss))
    runtime.register_agent(Agent("helper", child, description="Asks the user."))
    runtime.register_agent(Agent("chat", ModelPlanner("boss"), tools=[weather], agents=["helper"]))
    return runtime


async def _chain(store: AnyStore, run_id: str) -> list[str]:
    """``run_id`` and its successors, in order [K3]."""
    chain = [run_id]
    while successor := (await store.load_run(chain[-1])).successor_run_id:
        chain.append(successor)
    return chain


async def _children(store: AnyStore, run_id: str) -> list[str]:
    return [
        payloads.ChildRunLinked.decode(r.payload).child_run_id
        for r in await records(store, run_id)
        if r.type == payloads.CHILD_RUN_LINKED
    ]


async def test_a_child_that_asks_suspends_its_parent_and_resume_answers_it(
    store: AnyStore, session: str
) -> None:
    """The parent suspends with the child's question; resume continues the child [K1]
    under the parent's continuation, then the parent, which reads the child's answer."""
    sink = QueueSink()
    boss = [
        tool_calls(("h1", "helper", {"request": "Where to?"}), ("w1", "weather", {"city": "Oslo"})),
        reply("The helper says: You said Paris."),
    ]
    runtime = _runtime(store, sink, boss, _Asker("Which city?"))
    client = runtime.agent_client("chat")
    first = await client.run(session, "Plan my trip")
    assert first.status is RunStatus.SUSPENDED
    assert first.awaiting is not None
    assert (first.awaiting.kind, first.awaiting.question) == ("clarification", "Which city?")
    (child,) = await _children(store, first.run_id)
    assert (first.awaiting.run_id, first.awaiting.agent_id) == (child, "helper")
    assert (await store.load_run(child)).status is RunStatus.SUSPENDED
    assert (await types(store, first.run_id))[-6:] == [
        "phase:executing_tools",
        "tool_call_scheduled",
        "tool_call_scheduled",
        "child_run_linked",
        "tool_result_received",  # the weather call finished: its result is kept
        "run_suspended",
    ]
    held = payloads.RunSuspended.decode((await records(store, first.run_id))[-1].payload)
    assert (held.pending_count, held.required_tools) == (1, ("helper",))
    await valid_transcript(store, first.run_id)  # ends with the unanswered tool uses

    second = await client.resume(session, first.run_id, "Paris")
    assert second.status is RunStatus.COMPLETED
    assert second.text == "The helper says: You said Paris."
    assert await _chain(store, first.run_id) == [first.run_id, second.run_id]
    child_chain = await _chain(store, child)
    assert len(child_chain) == 2
    child2 = await store.load_run(child_chain[1])
    assert (child2.parent_run_id, child2.status) == (second.run_id, RunStatus.COMPLETED)
    assert await _children(store, second.run_id) == [child2.run_id]
    for run_id in (first.run_id, child, second.run_id, child2.run_id):
        await valid_transcript(store, run_id)
    results = (await valid_transcript(store, second.run_id))[-2]
    assert [(p.tool_use_id, p.content) for p in results.parts if isinstance(p, ToolResultPart)] == [
        ("h1", "You said Paris."),
        ("w1", "sunny in Oslo"),
    ]
    second_types = await types(store, second.run_id)
    assert second_types.count("tool_result_received") == 1  # only the child's, now
    assert "tool_call_scheduled" not in second_types
    assert "run_suspended" not in second_types
    done = [e for e in sink.for_run(child2.run_id) if isinstance(e, events.RunCompleted)]
    assert [e.status for e in done] == ["success"]


async def test_three_levels_with_a_confirmation_at_the_bottom(
    store: AnyStore, session: str
) -> None:
    """top -> middle -> bottom; bottom asks to confirm a booking: every level suspends,
    and one resume on the top approves it, runs the tool and unwinds every level."""
    booked.clear()
    sink = QueueSink()
    runtime = Runtime(store, stream=sink)
    runtime.register_model(
        "top",
        ScriptedModel(
            [tool_calls(("t1", "middle", {"request": "book dinner"})), reply("All set.")]
        ),
    )
    runtime.register_model(
        "middle",
        ScriptedModel(
            [tool_calls(("m1", "bottom", {"request": "book Chez Nous"})), reply("Booked.")]
        ),
    )
    runtime.register_model(
        "bottom",
        ScriptedModel(
            [
                tool_calls(("b1", "book", {"restaurant": "Chez Nous"}), text="Book it?"),
                reply("Done."),
            ]
        ),
    )
    runtime.register_agent(Agent("bottom", ModelPlanner("bottom"), tools=[book]))
    runtime.register_agent(Agent("middle", ModelPlanner("middle"), agents=["bottom"]))
    runtime.register_agent(Agent("top", ModelPlanner("top"), agents=["middle"]))
    client = runtime.agent_client("top")
    first = await client.run(session, "Dinner please")
    assert first.status is RunStatus.SUSPENDED
    assert first.awaiting is not None
    assert (first.awaiting.kind, first.awaiting.question) == ("confirmation", "Book it?")
    assert first.awaiting.agent_id == "bottom"
    assert [c.name for c in first.awaiting.calls] == ["book"]
    (middle,) = await _children(store, first.run_id)
    (bottom,) = await _children(store, middle)
    assert first.awaiting.run_id == bottom
    for run_id in (first.run_id, middle, bottom):
        assert (await store.load_run(run_id)).status is RunStatus.SUSPENDED
        await valid_transcript(store, run_id)
    assert booked == []
    with pytest.raises(ValidationError):  # the bottom waits for a confirmation
        await client.resume(session, first.run_id, "yes")
    second = await client.resume(session, first.run_id, Answer.approve())
    assert second.status is RunStatus.COMPLETED
    assert second.text == "All set."
    assert booked == ["Chez Nous"]
    middle2 = (await _chain(store, middle))[1]
    bottom2 = (await _chain(store, bottom))[1]
    assert (await store.load_run(middle2)).parent_run_id == second.run_id
    assert (await store.load_run(bottom2)).parent_run_id == middle2
    for run_id in (second.run_id, middle2, bottom2):
        assert (await store.load_run(run_id)).status is RunStatus.COMPLETED
        await valid_transcript(store, run_id)


async def test_a_child_that_asks_twice_suspends_the_parent_twice(
    store: AnyStore, session: str
) -> None:
    """Each new question of the child suspends the parent's continuation again."""
    boss = [tool_calls(("h1", "helper", {"request": "Where?"})), reply("Trip planned.")]
    runtime = _runtime(store, QueueSink(), boss, _Asker("Which city?", "Which month?"))
    client = runtime.agent_client("chat")
    first = await client.run(session, "Plan my trip")
    second = await client.resume(session, first.run_id, "Rome")
    assert second.status is RunStatus.SUSPENDED
    assert second.awaiting is not None
    assert second.awaiting.question == "Which month?"
    third = await client.resume(session, second.run_id, "May")
    assert third.text == "Trip planned."
    chain = await _chain(store, first.run_id)
    assert chain == [first.run_id, second.run_id, third.run_id]
    helper_runs = [c for r in chain for c in await _children(store, r)]
    assert len(helper_runs) == 3
    assert await _chain(store, helper_runs[0]) == helper_runs
    last = await valid_transcript(store, helper_runs[-1])
    assert last[-1].parts[0].text == "You said Rome and May."  # type: ignore[union-attr]
    for run_id in [*chain, *helper_runs]:
        await valid_transcript(store, run_id)


class _Recorder:
    """A parent planner that calls the helper, then reports what its resume turn got."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        from agentledger.runtime import ToolCall

        return PlanResult.call(ToolCall(id="h1", name="helper", input={"request": "Where?"}))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        got = [(o.tool_call_id, o.content) for o in input.tool_results]
        return PlanResult.answer(f"answer={input.answer!r} results={got}")


async def test_one_shot_parent_and_what_the_parent_planner_sees(store: AnyStore) -> None:
    """Without a session too [L4]: the answer goes to the child; the parent's planner
    gets the step's results, not the child's answer."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("helper", _Asker("Which city?")))
    runtime.register_agent(Agent("boss", _Recorder(), agents=["helper"]))
    client = runtime.agent_client("boss")
    first = await client.run_one_shot("Plan")
    assert first.status is RunStatus.SUSPENDED
    second = await client.resume("", first.run_id, "Oslo")
    assert second.text == "answer=None results=[('h1', 'You said Oslo.')]"
    (child,) = await _children(store, second.run_id)
    assert (await store.load_run(child)).session_id == ""
    await valid_transcript(store, child)


async def test_two_children_asking_at_once_are_answered_one_resume_each(
    store: AnyStore, session: str
) -> None:
    """Two parallel children suspend: the first resume answers the first (the parent
    suspends again with the second's question), the next answers the second, whose
    continuation runs two parent continuations after its predecessor's parent [K1]."""
    boss = [
        tool_calls(("h1", "helper", {"request": "A?"}), ("h2", "helper", {"request": "B?"})),
        reply("Both answered."),
    ]
    runtime = _runtime(store, QueueSink(), boss, _Asker("Which city?"))
    client = runtime.agent_client("chat")
    first = await client.run(session, "Ask twice")
    assert first.awaiting is not None
    assert first.awaiting.run_id == f"{first.run_id}.h1"
    second = await client.resume(session, first.run_id, "Paris")
    assert second.status is RunStatus.SUSPENDED
    assert second.awaiting is not None
    assert second.awaiting.run_id == f"{first.run_id}.h2"  # still the first parent's child
    third = await client.resume(session, second.run_id, "Rome")
    assert third.text == "Both answered."
    h2_next = (await _chain(store, f"{first.run_id}.h2"))[1]
    assert (await store.load_run(h2_next)).parent_run_id == third.run_id
    results = (await valid_transcript(store, third.run_id))[-2]
    assert [(p.tool_use_id, p.content) for p in results.parts if isinstance(p, ToolResultPart)] == [
        ("h1", "You said Paris."),
        ("h2", "You said Rome."),
    ]
    for run_id in await _chain(store, first.run_id):
        await valid_transcript(store, run_id)
