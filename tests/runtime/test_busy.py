"""End to end: a message while a run is busy (reject, queue, interrupt, steer), on every
store (MemoryStore, SQLite, PostgreSQL and the store service's client)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentledger.errors import SessionBusyError
from agentledger.runtime import Agent, QueueSink, Runtime, events, tool
from agentledger.runtime.busy import interruption_reason
from agentledger.runtime.planner import PlanInput, PlanResult, PlanResumeInput, ToolCall
from agentledger.runtime.workflow import INTERRUPTED
from agentledger.storage import MessageFate, RunStatus
from agentledger.transcript import Message, TextPart, ToolResultPart, validate_planner_transcript

pytestmark = pytest.mark.asyncio


def _text(message: Message) -> str:
    return "".join(p.text for p in message.parts if isinstance(p, TextPart))


class Echo:
    """Answers each user message with ``re: <it>`` and how many user messages it saw;
    a message containing ``wait`` holds the turn until ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.holding = asyncio.Event()

    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        messages = await input.prepare_messages()
        users = [m for m in messages if m.role == "user"]
        last = _text(users[-1])
        if "wait" in last:
            self.holding.set()
            await self.release.wait()
        return PlanResult.answer(f"re: {last} ({len(users)} user messages)")

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        return PlanResult.answer("resumed")


def _runtime(store: Any, planner: Echo, sink: QueueSink | None = None, **agent: Any) -> Runtime:
    runtime = Runtime(store, stream=sink if sink is not None else QueueSink())
    runtime.register_agent(Agent("chat", planner, **agent))
    return runtime


async def test_reject_names_the_running_run(every_store: Any, every_session: str) -> None:
    planner = Echo()
    runtime = _runtime(every_store, planner)
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "please wait", if_busy="queue")
    await planner.holding.wait()
    with pytest.raises(SessionBusyError) as caught:
        await client.start(every_session, "hello?", if_busy="reject")
    assert caught.value.run_id == first.run_id
    with pytest.raises(SessionBusyError):  # after= naming the running turn, no policy
        await client.start(every_session, "hello?", after=first.run_id)
    planner.release.set()
    assert (await first.wait()).status is RunStatus.COMPLETED
    assert len(await every_store.list_session_messages(every_session)) == 1
    await runtime.close()


async def test_queue_runs_each_message_once_in_order(every_store: Any, every_session: str) -> None:
    planner = Echo()
    sink = QueueSink()
    runtime = _runtime(every_store, planner, sink, if_busy="queue")
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "please wait")
    await planner.holding.wait()
    second = await client.start(every_session, "two")
    third = await client.start(every_session, "three")
    assert [second.message.fate, third.message.fate] == [MessageFate.QUEUED] * 2
    assert third.message.after == second.run_id
    planner.release.set()
    outputs = [await h.wait() for h in (first, second, third)]
    assert [o.status for o in outputs] == [RunStatus.COMPLETED] * 3
    transcript = await runtime.transcript(third.run_id)
    assert [_text(m) for m in transcript] == [
        "please wait",
        "re: please wait (1 user messages)",
        "two",
        "re: two (2 user messages)",
        "three",
        "re: three (3 user messages)",
    ]
    fates = [e for e in sink.events if isinstance(e, events.MessageSubmitted)]
    assert [(e.run_id, e.fate) for e in fates] == [
        (first.run_id, "start"),
        (second.run_id, "queued"),
        (third.run_id, "queued"),
    ]
    assert await every_store.load_pending_messages(every_session) == []
    await runtime.close()


async def test_interrupt_cancels_naming_the_message(every_store: Any, every_session: str) -> None:
    planner = Echo()
    runtime = _runtime(every_store, planner)
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "please wait", if_busy="queue")
    await planner.holding.wait()
    stop = await client.start(every_session, "stop, do this instead", if_busy="interrupt")
    assert stop.message.fate is MessageFate.INTERRUPTING
    ended = await first.wait()
    assert ended.status is RunStatus.CANCELED
    assert ended.cancellation_reason == interruption_reason(stop.run_id)
    assert (await stop.wait()).status is RunStatus.COMPLETED
    transcript = await runtime.transcript(stop.run_id)
    validate_planner_transcript(transcript)
    assert [_text(m) for m in transcript] == [
        "please wait",
        "stop, do this instead",
        "re: stop, do this instead (2 user messages)",
    ]
    await runtime.close()


async def test_steer_waits_as_the_next_turn(every_store: Any, every_session: str) -> None:
    planner = Echo()
    runtime = _runtime(every_store, planner)
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "please wait", if_busy="queue")
    await planner.holding.wait()
    steer = await client.start(every_session, "also mention cats", if_busy="steer")
    assert steer.message.fate is MessageFate.STEERING
    planner.release.set()
    await first.wait()
    out = await steer.wait()
    assert out.status is RunStatus.COMPLETED
    assert _text((await runtime.transcript(steer.run_id))[-1]).startswith("re: also mention")
    await runtime.close()


async def test_sixteen_concurrent_messages(every_store: Any, every_session: str) -> None:
    """16 messages at once with queue: 16 turns, one order, each answering its own."""
    planner = Echo()
    runtime = _runtime(every_store, planner, if_busy="queue")
    client = runtime.agent_client("chat")
    handles = await asyncio.gather(
        *(client.start(every_session, f"message {i}") for i in range(16))
    )
    outputs = await asyncio.gather(*(h.wait() for h in handles))
    assert [o.status for o in outputs] == [RunStatus.COMPLETED] * 16
    order = sorted(handles, key=lambda h: h.message.position)
    assert [h.message.position for h in order] == list(range(1, 17))
    last = await runtime.transcript(order[-1].run_id)
    users = [_text(m) for m in last if m.role == "user"]
    assert users == [_text_of(h) for h in order]
    for i, handle in enumerate(order):
        answer = _text((await runtime.transcript(handle.run_id))[-1])
        assert answer == f"re: {_text_of(handle)} ({i + 1} user messages)"
    await runtime.close()


def _text_of(handle: Any) -> str:
    from agentledger.transcript import decode_message

    return _text(decode_message(handle.message.message))


class CallsSlowTool(Echo):
    """The first user message makes it call the ``slow`` tool, which holds until released."""

    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        messages = await input.prepare_messages()
        if len([m for m in messages if m.role == "user"]) == 1:
            return PlanResult.call(ToolCall(id="t1", name="slow", input={}))
        return await super().plan_start(input)

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        return PlanResult.answer("done")


async def test_interrupt_during_a_tool_keeps_its_interrupted_result(
    every_store: Any, every_session: str
) -> None:
    """The new turn follows the canceled one through its interrupted tool result: no tool
    use is left without its result, and the result says the call was interrupted."""
    planner = CallsSlowTool()
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        started.set()
        await planner.release.wait()
        return "never"

    runtime = Runtime(every_store, stream=QueueSink())
    runtime.register_agent(Agent("chat", planner, tools=[slow]))
    client = runtime.agent_client("chat")
    first = await client.start(every_session, "look it up", if_busy="queue")
    await started.wait()
    stop = await client.start(every_session, "never mind", if_busy="interrupt")
    assert (await first.wait()).status is RunStatus.CANCELED
    assert (await stop.wait()).status is RunStatus.COMPLETED
    transcript = await runtime.transcript(stop.run_id)
    validate_planner_transcript(transcript)
    results = [p for m in transcript for p in m.parts if isinstance(p, ToolResultPart)]
    assert [(r.tool_use_id, r.is_error, r.content) for r in results] == [("t1", True, INTERRUPTED)]
    assert _text(transcript[-2]) == "never mind"
    await runtime.close()
