"""End to end: runs that wait for outside input, and their continuations [L6] [K1]-[K3]."""

from __future__ import annotations

from typing import Any

import pytest

from agentledger.errors import RunConflictError, RunNotActiveError, ValidationError
from agentledger.runtime import (
    Agent,
    Answer,
    AwaitClarification,
    AwaitExternalTools,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    QueueSink,
    Runtime,
    ToolCall,
    tool,
    user_message,
)
from agentledger.runtime.checkpoint import RunCheckpoint
from agentledger.storage import RunStatus, payloads
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import TextPart, ToolResultPart
from tests.runtime.support import AnyStore, chat_runtime, records, types, valid_transcript

booked: list[dict[str, Any]] = []


@tool(confirm=True)
async def book_table(restaurant: str, people: int) -> str:
    """Book a table (needs the user's confirmation)."""
    booked.append({"restaurant": restaurant, "people": people})
    return f"booked {restaurant} for {people}"


SUSPENDED = [
    "run_started",
    "prompt_rendered",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "model_usage",
    "transcript_messages_appended",
    "run_suspended",
]


def _booking_model(*after: Any) -> ScriptedModel:
    return ScriptedModel(
        [
            tool_calls(
                ("b1", "book_table", {"restaurant": "Chez Nous", "people": 2}), text="Book it?"
            ),
            *after,
        ]
    )


async def test_confirmation_suspends_and_resume_runs_the_tool(
    store: AnyStore, session: str
) -> None:
    """[L6] [K1] a confirm=True call suspends; approving continues in a successor run."""
    booked.clear()
    runtime = chat_runtime(store, _booking_model(reply("Done: table booked.")), tools=[book_table])
    client = runtime.agent_client("chat")
    first = await client.run(session, [user_message("Book Chez Nous for 2")], labels={"k": "v"})
    assert first.status is RunStatus.SUSPENDED
    assert first.awaiting is not None
    assert first.awaiting.kind == "confirmation"
    assert [c.name for c in first.awaiting.calls] == ["book_table"]
    assert first.awaiting.question == "Book it?"
    assert booked == []
    assert await types(store, first.run_id) == SUSPENDED
    suspended = payloads.RunSuspended.decode((await records(store, first.run_id))[-1].payload)
    assert suspended.required_tools == ("book_table",)
    assert suspended.pending_count == 1
    await valid_transcript(store, first.run_id)  # trailing tool_use awaiting its result is valid

    second = await client.resume(session, first.run_id, Answer.approve("yes please"))
    assert second.status is RunStatus.COMPLETED
    assert second.text == "Done: table booked."
    assert booked == [{"restaurant": "Chez Nous", "people": 2}]
    assert second.turn_id == first.turn_id
    assert await types(store, second.run_id) == [
        "run_started",
        "prompt_rendered",
        "transcript_messages_referenced",
        "phase:prompted",
        "phase:executing_tools",
        "tool_call_scheduled",
        "tool_result_received",
        "transcript_messages_appended",
        "phase:synthesizing",
        "model_usage",
        "transcript_messages_appended",
        "run_completed",
    ]
    started = payloads.RunStarted.decode((await records(store, second.run_id))[0].payload)
    assert started.predecessor_run_id == first.run_id  # [K2] only in the record
    assert started.labels == {"k": "v"}
    assert (await store.load_run(first.run_id)).successor_run_id == second.run_id  # [K3]
    messages = await valid_transcript(store, second.run_id)
    assert messages[:2] == await valid_transcript(store, first.run_id)
    answer = messages[2]
    assert isinstance(answer.parts[0], ToolResultPart)
    assert not answer.parts[0].is_error
    assert answer.parts[1] == TextPart(text="yes please")


async def test_denied_confirmation_gives_an_error_result(store: AnyStore, session: str) -> None:
    """Declining answers the pending tool_use with an error result; the tool never runs."""
    booked.clear()
    runtime = chat_runtime(store, _booking_model(reply("OK, not booked.")), tools=[book_table])
    client = runtime.agent_client("chat")
    first = await client.run(session, [user_message("Book it")])
    second = await client.resume(session, first.run_id, Answer.deny("too expensive"))
    assert second.status is RunStatus.COMPLETED
    assert booked == []
    result = (await valid_transcript(store, second.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert result.content == "declined by the user: too expensive"
    assert "tool_call_scheduled" not in await types(store, second.run_id)


class _Asker:
    """Asks a question first, then answers with what the user said."""

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return PlanResult(await_=AwaitClarification(question="Which city?"))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        assert input.answer is not None
        last = (await input.prepare_messages())[-1]
        return PlanResult.answer(f"You said {last.parts[0].text}.")  # type: ignore[union-attr]


async def test_clarification_is_answered_by_text(store: AnyStore, session: str) -> None:
    """A clarification suspends with the question; the answer is appended as a user message."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", _Asker()))
    client = runtime.agent_client("chat")
    first = await client.run(session, [user_message("Weather?")])
    assert first.awaiting is not None
    assert first.awaiting.question == "Which city?"
    second = await client.resume(session, first.run_id, "Paris")
    assert second.text == "You said Paris."
    assert [m.role for m in await valid_transcript(store, second.run_id)] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    checkpoint = RunCheckpoint.decode((await store.load_run_suspension(first.run_id)).data)
    assert checkpoint.kind == "clarification"
    assert checkpoint.pending == ()


class _External:
    async def plan_start(self, input: PlanInput) -> PlanResult:
        call = ToolCall(id="x1", name="lookup", input={"q": "stock"})
        return PlanResult(await_=AwaitExternalTools(calls=(call,)))

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return PlanResult.answer(f"Result: {input.tool_results[0].content}")


async def test_external_tool_results_come_from_the_answer(store: AnyStore, session: str) -> None:
    """External tool results supplied on resume become the pending calls' tool_results."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", _External()))
    client = runtime.agent_client("chat")
    first = await client.run(session, [user_message("stock?")])
    assert first.awaiting is not None
    assert first.awaiting.kind == "external_tools"
    second = await client.resume(session, first.run_id, Answer(tool_results={"x1": {"n": 42}}))
    assert second.text == "Result: {'n': 42}"
    kinds = await types(store, second.run_id)
    assert "tool_result_received" in kinds
    assert "tool_call_scheduled" not in kinds
    await valid_transcript(store, second.run_id)


async def test_a_suspension_has_one_successor(store: AnyStore, session: str) -> None:
    """[K3] a second continuation of the same suspended run is refused."""
    runtime = Runtime(store, stream=QueueSink())
    runtime.register_agent(Agent("chat", _Asker()))
    client = runtime.agent_client("chat")
    first = await client.run(session, [user_message("Weather?")])
    await client.resume(session, first.run_id, "Paris")
    with pytest.raises((RunConflictError, RunNotActiveError)):
        await client.resume(session, first.run_id, "Rome")
    with pytest.raises(ValidationError):
        await client.resume(session, first.run_id, Answer(tool_results={"x": object()}))


def test_checkpoints_decode_strictly() -> None:
    """The checkpoint is versioned and strict: unknown versions and fields are refused."""
    checkpoint = RunCheckpoint(
        version=1, agent_id="a", turn=1, awaiting=AwaitClarification(question="?")
    )
    assert RunCheckpoint.decode(checkpoint.encode()) == checkpoint
    for bad in (
        checkpoint.encode().replace(b'"version":1', b'"version":2'),
        checkpoint.encode().replace(b'"turn":1', b'"turn":1,"extra":0'),
        checkpoint.encode() + b" {}",
        b"not json",
    ):
        with pytest.raises(ValidationError):
            RunCheckpoint.decode(bad)


async def test_scripted_model_streams_and_runs_out_loudly() -> None:
    """ScriptedModel streams deltas ending with StreamEnd, and names the extra call."""
    from agentledger.providers.model import ModelRequest, StreamEnd, TextDelta
    from agentledger.testing import ScriptExhaustedError

    model = ScriptedModel([reply("hello world")], chunk=4)
    request = ModelRequest(model="m", messages=(user_message("hi"),))
    events = [e async for e in model.stream(request)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["hell", "o wo", "rld"]
    assert isinstance(events[-1], StreamEnd)
    assert model.remaining == 0
    with pytest.raises(ScriptExhaustedError, match="1 scripted response"):
        await model.complete(request)
    assert len(model.requests) == 2


async def test_an_answer_must_fit_what_the_run_waits_for(store: AnyStore, session: str) -> None:
    """A confirmation needs approved set; external results only for pending calls. Refused
    before anything starts: the suspended run keeps waiting."""
    runtime = chat_runtime(store, _booking_model(reply("never")), tools=[book_table])
    client = runtime.agent_client("chat")
    first = await client.run(session, [user_message("Book it")])
    with pytest.raises(ValidationError, match="confirmation"):
        await client.resume(session, first.run_id, "sure")
    with pytest.raises(ValidationError, match="pending calls"):
        await client.resume(session, first.run_id, Answer(approved=True, tool_results={"zz": 1}))
    meta = await store.load_run(first.run_id)
    assert meta.status is RunStatus.SUSPENDED
    assert meta.successor_run_id == ""


async def test_resuming_a_run_that_is_not_suspended_says_so(store: AnyStore, session: str) -> None:
    """resume on a completed run names its status, not a missing suspension."""
    runtime = chat_runtime(store, ScriptedModel([reply("hello")]))
    client = runtime.agent_client("chat")
    done = await client.run(session, "hi")
    with pytest.raises(RunNotActiveError) as e:
        await client.resume(session, done.run_id, "more")
    assert (e.value.run_id, e.value.expected, e.value.got) == (
        done.run_id,
        "suspended",
        "completed",
    )
    assert "is completed, expected suspended" in str(e.value)
    assert [r.run_id for r in await store.list_runs_by_session(session)] == [done.run_id]


def test_crash_loop_checkpoints_round_trip_and_name_what_looped() -> None:
    """A crash_loop checkpoint keeps the step and what kept dying; its question says so."""
    from agentledger.runtime.checkpoint import CrashLoop
    from agentledger.runtime.planner import ToolCall, ToolOutcome

    call, other = ToolCall(id="b", name="fragile"), ToolCall(id="a", name="steady")
    looped = CrashLoop(activity="agentledger.tool_call", attempts=3, calls=(call,))
    checkpoint = RunCheckpoint(
        version=1,
        agent_id="a",
        turn=1,
        calls=(other, call),
        results=(ToolOutcome(tool_call_id="a", tool_name="steady", content="ok"),),
        crash_loop=looped,
    )
    assert RunCheckpoint.decode(checkpoint.encode()) == checkpoint
    assert checkpoint.kind == "crash_loop"
    assert checkpoint.pending == (call,)
    asked = looped.awaiting(run_id="r", agent_id="a")
    assert (asked.kind, asked.activity, asked.attempts, asked.calls) == (
        "crash_loop",
        "agentledger.tool_call",
        3,
        (call,),
    )
    assert "fragile" in asked.question
    assert "started 3 times" in asked.question
    planner = RunCheckpoint(
        version=1,
        agent_id="a",
        turn=2,
        crash_loop=CrashLoop(activity="agentledger.plan_turn", attempts=2, resume=True),
    )
    assert planner.kind == "crash_loop"
    assert planner.pending == ()
    with pytest.raises(ValueError, match="exactly one"):
        RunCheckpoint(
            version=1,
            agent_id="a",
            turn=1,
            awaiting=AwaitClarification(question="?"),
            crash_loop=looped,
        )


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_max_turn_attempts_must_be_a_positive_int(bad: object) -> None:
    """Agent(max_turn_attempts=...) is validated when the agent is made."""
    with pytest.raises(ValidationError, match="max_turn_attempts"):
        Agent("a", _Asker(), max_turn_attempts=bad)  # type: ignore[arg-type]
    assert Agent("a", _Asker()).max_turn_attempts == 3
    assert Agent("a", _Asker(), max_turn_attempts=1).max_turn_attempts == 1
