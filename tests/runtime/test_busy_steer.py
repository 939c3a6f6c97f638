"""End to end: a steering message joins the running run at its next planner turn, on every
store (MemoryStore, SQLite, PostgreSQL and the store service's client)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from agentledger.runtime import Agent, QueueSink, Runtime, events, tool
from agentledger.runtime.planner import PlanInput, PlanResult, PlanResumeInput, ToolCall
from agentledger.storage import MessageFate, RunStatus
from agentledger.storage.lifecycle.messages import MESSAGE_STEERED
from agentledger.transcript import Message, TextPart, validate_planner_transcript

pytestmark = pytest.mark.asyncio


def _text(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


class Steerable:
    """Calls the ``slow`` tool on its first turn; after the tool, answers with every user
    text it sees (so the test sees what the planner saw)."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []
        self.gate: asyncio.Event | None = None  # when set, each turn waits for it
        self.holding = asyncio.Event()

    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        if self.gate is not None:
            self.holding.set()
            await self.gate.wait()
        messages = await input.prepare_messages()
        users = [_text(m) for m in messages if m.role == "user" and _text(m)]
        self.seen.append(users)
        if len(users) == 1 and users[0] == "look it up":
            return PlanResult.call(ToolCall(id="t1", name="slow", input={}))
        return PlanResult.answer("re: " + " / ".join(users))

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        messages = await input.prepare_messages()
        users = [_text(m) for m in messages if m.role == "user" and _text(m)]
        self.seen.append(users)
        return PlanResult.answer("re: " + " / ".join(users))


def _setup(store: Any) -> tuple[Runtime, Steerable, asyncio.Event, asyncio.Event, QueueSink]:
    planner = Steerable()
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        started.set()
        await release.wait()
        return "found"

    sink = QueueSink()
    runtime = Runtime(store, stream=sink)
    runtime.register_agent(Agent("chat", planner, tools=[slow]))
    return runtime, planner, started, release, sink


async def test_a_steer_joins_the_run_at_its_next_planner_turn(
    every_store: Any, every_session: str
) -> None:
    runtime, planner, started, release, sink = _setup(every_store)
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "look it up", if_busy="queue")
    await started.wait()  # the run is in its tool step
    steer = await client.start(every_session, "also mention cats", if_busy="steer")
    assert steer.message.fate is MessageFate.STEERING
    release.set()
    out = await first.wait()
    assert out.status is RunStatus.COMPLETED
    # the planner turn after the tool saw the steering message
    assert planner.seen[-1] == ["look it up", "also mention cats"]
    assert out.text == "re: look it up / also mention cats"
    transcript = await runtime.transcript(first.run_id)
    validate_planner_transcript(transcript)
    assert [m.role for m in transcript] == ["user", "assistant", "user", "user", "assistant"]
    # its handle answers with the run it joined; it never started a turn of its own
    joined = await steer.wait()
    assert joined.run_id == first.run_id
    assert joined.text == out.text
    stored = await every_store.list_session_messages(every_session)
    assert [(m.run_id, m.fate, m.started) for m in stored] == [
        (first.run_id, MessageFate.START, True),
        (steer.run_id, MessageFate.STEERED, True),
    ]
    assert await every_store.load_pending_messages(every_session) == []
    runs = await every_store.list_runs_by_session(every_session)
    assert [r.run_id for r in runs] == [first.run_id]
    # provenance: the message's run id and position, recorded in the run
    page = await every_store.list_run_records(first.run_id)
    marks = [r for r in page.records if r.type == MESSAGE_STEERED]
    assert len(marks) == 1
    provenance = msgspec.json.decode(marks[0].payload)
    assert provenance["message_run_id"] == steer.run_id
    assert provenance["position"] == steer.message.position
    assert provenance["fate"] == "steered"
    # the stream carried the steered records
    said = [e for e in sink.events if isinstance(e, events.MessageSteered)]
    assert [(e.run_id, e.message_run_id, e.position) for e in said] == [
        (first.run_id, steer.run_id, steer.message.position)
    ]
    await runtime.close()


async def test_two_steers_and_a_queued_message_behind_them(
    every_store: Any, every_session: str
) -> None:
    """Both steers join the run; a message queued behind them follows the run."""
    runtime, _planner, started, release, _ = _setup(every_store)
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "look it up", if_busy="queue")
    await started.wait()
    one = await client.start(every_session, "cats", if_busy="steer")
    two = await client.start(every_session, "dogs", if_busy="steer")
    later = await client.start(every_session, "next question", if_busy="queue")
    assert (one.message.fate, two.message.fate) == (MessageFate.STEERING,) * 2
    assert later.message.fate is MessageFate.QUEUED
    release.set()
    assert (await first.wait()).text == "re: look it up / cats / dogs"
    assert (await later.wait()).text == "re: look it up / cats / dogs / next question"
    assert (await one.wait()).run_id == first.run_id
    assert (await two.wait()).run_id == first.run_id
    runs = await every_store.list_runs_by_session(every_session)
    assert sorted(r.run_id for r in runs) == sorted([first.run_id, later.run_id])
    await runtime.close()


async def test_a_steer_after_the_last_planner_turn_is_the_next_turn(
    every_store: Any, every_session: str
) -> None:
    """The run's last planner turn is under way: the message becomes its own turn."""
    planner = Steerable()
    planner.gate = hold = asyncio.Event()
    holding = planner.holding
    runtime = Runtime(every_store, stream=QueueSink())
    runtime.register_agent(Agent("chat", planner))
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "hello", if_busy="queue")
    await holding.wait()
    steer = await client.start(every_session, "cats", if_busy="steer")
    hold.set()
    assert (await first.wait()).text == "re: hello"
    out = await steer.wait()
    assert out.run_id == steer.run_id
    assert out.text == "re: hello / cats"
    stored = await every_store.list_session_messages(every_session)
    assert [(m.fate, m.started) for m in stored] == [
        (MessageFate.START, True),
        (MessageFate.STEERING, True),
    ]
    await runtime.close()


async def test_the_runtime_keeps_nothing_of_turns_that_ended(
    every_store: Any, every_session: str
) -> None:
    """The per-message bookkeeping is bounded: after N queued messages (and a steer) have
    been answered, nothing is left of them in the runtime."""
    runtime, _, started, release, _ = _setup(every_store)
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "look it up", if_busy="queue")
    await started.wait()
    steer = await client.start(every_session, "cats", if_busy="steer")
    handles = [await client.start(every_session, f"m{i}", if_busy="queue") for i in range(6)]
    release.set()
    for handle in (first, steer, *handles):
        assert (await handle.wait()).status is RunStatus.COMPLETED
    busy = runtime._busy
    while busy._tasks:  # the last turn's follower starts nothing, then forgets it
        await asyncio.gather(*busy._tasks, return_exceptions=True)
    kept = (busy._launched, busy._waiters, busy._locks, busy._followed, busy._lock_users)
    assert kept == (set(), {}, {}, set(), {})
    await runtime.close()


class _HoldsAfterTheTool(Steerable):
    """Steerable, whose turn after the tool waits (holding set) until it is canceled."""

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        await input.prepare_messages()
        self.holding.set()
        await asyncio.Event().wait()  # until the run is canceled
        raise AssertionError("unreachable")


async def test_canceling_a_steer_the_run_took_cancels_that_run(
    every_store: Any, every_session: str
) -> None:
    """A steering message has no turn of its own once the run took it: canceling its
    handle cancels the run that answers it (before, it waited for a turn that never starts)."""
    planner = _HoldsAfterTheTool()
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        started.set()
        await release.wait()
        return "found"

    runtime = Runtime(every_store)
    runtime.register_agent(Agent("chat", planner, tools=[slow]))
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "look it up", if_busy="queue")
    await started.wait()
    steer = await client.start(every_session, "and cats", if_busy="steer")
    release.set()
    await planner.holding.wait()  # the turn after the tool took the steer and now waits
    fates = {m.run_id: m.fate for m in await every_store.list_session_messages(every_session)}
    assert fates[steer.run_id] is MessageFate.STEERED
    await asyncio.wait_for(steer.cancel("the user gave up"), 60)  # a hang guard only
    out = await first.wait()
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == "the user gave up"
    await runtime.close()
