"""End to end: cancellation provenance [C1] [C2] [C3] and interrupted tool calls."""

from __future__ import annotations

import asyncio

import pytest

from agentledger.errors import RunNotActiveError, ValidationError
from agentledger.runtime import QueueSink, RunOutput, events, tool, user_message
from agentledger.runtime.workflow import INTERRUPTED
from agentledger.storage import RunStatus, StartOutcome, payloads
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart
from tests.runtime.support import AnyStore, chat_runtime, now_ms, records, types, valid_transcript


def _blocking_tools() -> tuple[asyncio.Event, list[object]]:
    return asyncio.Event(), []


async def _start_blocked(store: AnyStore, session: str, sink: QueueSink | None = None):  # type: ignore[no-untyped-def]
    running = asyncio.Event()
    never = asyncio.Event()

    @tool
    async def quick(x: int) -> int:
        return x * 2

    @tool
    async def slow(topic: str) -> str:
        running.set()
        await never.wait()
        return "never"

    model = ScriptedModel(
        [tool_calls(("q1", "quick", {"x": 21}), ("s1", "slow", {"topic": "everything"}))]
    )
    runtime = chat_runtime(store, model, tools=[quick, slow], stream=sink)
    handle = await runtime.agent_client("chat").start(session, [user_message("research")])
    await asyncio.wait_for(running.wait(), 60)
    return runtime, handle


async def test_cancel_while_a_tool_runs(store: AnyStore, session: str) -> None:
    """[C1] the intent is recorded, the tool in flight gets an interrupted result, the
    finished one keeps its result, and run_completed repeats the reason."""
    sink = QueueSink()
    runtime, handle = await _start_blocked(store, session, sink)
    await handle.cancel("user pressed stop")
    out = await asyncio.wait_for(handle.wait(), 60)
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == "user pressed stop"
    assert await types(store, handle.run_id) == [
        "run_started",
        "prompt_rendered",
        "transcript_messages_appended",
        "phase:prompted",
        "phase:planning",
        "model_usage",
        "transcript_messages_appended",
        "phase:executing_tools",
        "tool_call_scheduled",
        "tool_call_scheduled",
        "runtime.cancellation_intent",
        "tool_result_received",
        "tool_result_received",
        "transcript_messages_appended",
        "run_completed",
    ]
    stored = await records(store, handle.run_id)
    done = payloads.RunCompleted.decode(stored[-1].payload)
    assert done.status == "canceled"
    assert done.cancellation is not None
    assert done.cancellation.reason == "user pressed stop"
    meta = await store.load_run(handle.run_id)
    assert meta.status is RunStatus.CANCELED
    assert meta.cancellation_reason == "user pressed stop"
    quick, slow = (await valid_transcript(store, handle.run_id))[2].parts
    assert isinstance(quick, ToolResultPart)
    assert quick.content == 42
    assert not quick.is_error
    assert isinstance(slow, ToolResultPart)
    assert slow.is_error
    assert slow.content == INTERRUPTED
    intents = [
        e for e in sink.for_run(handle.run_id) if isinstance(e, events.CancellationRequested)
    ]
    assert [e.reason for e in intents] == ["user pressed stop"]
    with pytest.raises(RunNotActiveError):  # the run is over: nothing left to cancel
        await runtime.cancel_run(handle.run_id, "again")


async def test_cancel_twice_with_the_same_reason(store: AnyStore, session: str) -> None:
    """[C1] asking again with the same reason is not a second intent."""
    runtime, handle = await _start_blocked(store, session)
    await runtime.cancel_run(handle.run_id, "stop")
    await runtime.cancel_run(handle.run_id, "stop")
    out = await asyncio.wait_for(handle.wait(), 60)
    assert out.cancellation_reason == "stop"
    kinds = await types(store, handle.run_id)
    assert kinds.count("runtime.cancellation_intent") == 1
    await valid_transcript(store, handle.run_id)


async def test_engine_cancellation_without_a_request(store: AnyStore, session: str) -> None:
    """[C3] the engine cancels with no recorded request: no intent, reason engine_canceled."""
    runtime, handle = await _start_blocked(store, session)
    assert await runtime.engine.cancel(handle.run_id)
    out = await asyncio.wait_for(handle.wait(), 60)
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == payloads.ENGINE_CANCELED
    kinds = await types(store, handle.run_id)
    assert "runtime.cancellation_intent" not in kinds
    assert kinds[-1] == "run_completed"
    assert (await store.load_run(handle.run_id)).cancellation_reason == ""
    done = payloads.RunCompleted.decode((await records(store, handle.run_id))[-1].payload)
    assert done.cancellation is not None
    assert done.cancellation.reason == "engine_canceled"
    await valid_transcript(store, handle.run_id)


async def test_cancel_during_the_planner_turn(store: AnyStore, session: str) -> None:
    """[C1] a model call in flight is interrupted; nothing of that turn is recorded
    but its phase, which the turn writes (and streams) before asking the model, so the
    turn's model output follows it on the stream.
    """
    thinking = asyncio.Event()

    class SlowModel(ScriptedModel):
        async def complete(self, request):  # type: ignore[no-untyped-def]
            thinking.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def stream(self, request):  # type: ignore[no-untyped-def,override]
            yield await self.complete(request)

    runtime = chat_runtime(store, SlowModel([]))
    handle = await runtime.agent_client("chat").start(session, [user_message("hi")])
    await asyncio.wait_for(thinking.wait(), 60)
    await handle.cancel("changed my mind")
    out = await asyncio.wait_for(handle.wait(), 60)
    assert out.cancellation_reason == "changed my mind"
    assert (await types(store, handle.run_id))[-3:] == [
        "phase:planning",
        "runtime.cancellation_intent",
        "run_completed",
    ]
    await valid_transcript(store, handle.run_id)


async def test_a_run_in_an_ended_session_does_no_work(store: AnyStore, session: str) -> None:
    """[C2] the start finds the session ended: run_started + canceled run_completed, no
    planner call, no tool call."""
    model = ScriptedModel([reply("should not be asked")])
    runtime = chat_runtime(store, model)
    await store.end_session(session, ended_at=now_ms())
    out = await runtime.agent_client("chat").run(session, [user_message("hi")])
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == payloads.SESSION_ENDED
    assert await types(store, out.run_id) == ["run_started", "run_completed"]
    meta = await store.load_run(out.run_id)
    assert meta.start_outcome is StartOutcome.STOP
    assert meta.cancellation_reason == "session_ended"
    assert model.requests == []
    assert await valid_transcript(store, out.run_id) == []


async def _end_the_session_while_tools_wait(
    store: AnyStore, session: str, calls: ScriptedModel
) -> tuple[str, RunOutput]:
    """Run ``chat`` with ``calls`` (of ``wait_here``), end the session while the tools
    wait, then let them finish; the run's id and outcome."""
    running = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def wait_here(n: int = 0) -> str:
        running.set()
        await release.wait()
        return f"done {n}"

    runtime = chat_runtime(store, calls, tools=[wait_here])
    handle = await runtime.agent_client("chat").start(session, [user_message("go")])
    await asyncio.wait_for(running.wait(), 60)
    await store.end_session(session, ended_at=now_ms())
    release.set()
    return handle.run_id, await asyncio.wait_for(handle.wait(), 60)


async def test_a_session_ended_mid_run_stops_new_work(store: AnyStore, session: str) -> None:
    """[D2] once the session ends, the run writes its final record but plans no more."""
    model = ScriptedModel([tool_calls(("w1", "wait_here", {})), reply("never asked")])
    run_id, out = await _end_the_session_while_tools_wait(store, session, model)
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "session_ended"
    assert len(model.requests) == 1
    await valid_transcript(store, run_id)


async def test_a_session_ended_during_parallel_calls_asks_the_model_no_more(
    store: AnyStore, session: str
) -> None:
    """[D2] parallel calls' results are written by the next planner turn: that turn finds
    the session ended (a read before the model call), writes them and plans no more."""
    calls = tool_calls(("w1", "wait_here", {"n": 1}), ("w2", "wait_here", {"n": 2}))
    model = ScriptedModel([calls, reply("never asked")])
    run_id, out = await _end_the_session_while_tools_wait(store, session, model)
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert out.failure.kind == "session_ended"
    assert len(model.requests) == 1
    assert (await types(store, run_id)).count("tool_result_received") == 2
    await valid_transcript(store, run_id)


@pytest.mark.parametrize("reason", ["", payloads.SESSION_ENDED, payloads.ENGINE_CANCELED])
async def test_an_empty_or_reserved_reason_is_refused_before_anything(
    store: AnyStore, session: str, reason: str
) -> None:
    """[C1] [C3] cancel_run needs a real reason: an empty or reserved one is a
    ValidationError, with no intent recorded and the engine not asked to cancel."""
    runtime, handle = await _start_blocked(store, session)
    before = await types(store, handle.run_id)
    with pytest.raises(ValidationError) as e:
        await runtime.cancel_run(handle.run_id, reason)
    assert e.value.field == "reason"
    info = await runtime.engine.describe(handle.run_id)
    assert info is not None
    assert not info.cancel_requested
    assert await types(store, handle.run_id) == before
    await runtime.cancel_run(handle.run_id, "a real reason")
    out = await asyncio.wait_for(handle.wait(), 60)
    assert out.cancellation_reason == "a real reason"


async def test_a_write_under_way_ends_whatever_cancels_its_activity() -> None:
    """An activity canceled during a store write: the write runs to its end either way;
    ``finish`` then completes with its result (the work it records is done),
    ``before`` lets the cancellation through only after it; a write's own error, or
    its own cancellation, reaches the activity as it is."""
    from agentledger.runtime.write_through import before, finish

    async def write(writing: asyncio.Event, gate: asyncio.Event, wrote: asyncio.Event) -> str:
        writing.set()
        await gate.wait()
        wrote.set()
        return "stored"

    for helper, canceled in ((finish, False), (before, True)):
        writing, gate, wrote = asyncio.Event(), asyncio.Event(), asyncio.Event()
        activity = asyncio.ensure_future(helper(write(writing, gate, wrote)))
        await writing.wait()
        activity.cancel()
        await asyncio.sleep(0)
        assert not activity.done()  # it waits for the write
        gate.set()
        if canceled:
            with pytest.raises(asyncio.CancelledError):
                await activity
        else:
            assert await activity == "stored"
        assert wrote.is_set()

    async def refused() -> str:
        raise ValidationError(field="records", expected="valid", got="invalid")

    for helper in (finish, before):
        with pytest.raises(ValidationError):
            await helper(refused())

    async def stuck(tasks: list[asyncio.Task[object]], started: asyncio.Event) -> str:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        started.set()
        await asyncio.Event().wait()
        return "never"

    for helper in (finish, before):
        tasks: list[asyncio.Task[object]] = []
        started = asyncio.Event()
        activity = asyncio.ensure_future(helper(stuck(tasks, started)))
        await started.wait()
        tasks[0].cancel()  # the write's own task, canceled (as when the loop closes)
        with pytest.raises(asyncio.CancelledError):
            await activity
