"""ensure_run_completion [E2]: closing runs whose workflow is gone, redelivering final events."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from agentledger.engine import InProcessEngine, RetryPolicy
from agentledger.errors import CorruptRecordError, RunNotFoundError, TransientError, ValidationError
from agentledger.runtime import QueueSink, Runtime, events, user_message
from agentledger.runtime.records import RecordSpec
from agentledger.storage import RecordBuilder, RunStart, RunStatus, payloads
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.schema import _backfill_checksums
from agentledger.testing import ScriptedModel, reply
from agentledger.transcript import Message, TextPart, ToolResultPart, ToolUsePart
from tests.conditions import HANG_GUARD
from tests.runtime.support import AnyStore, chat_runtime, now_ms, records, types, valid_transcript
from tests.runtime.test_failures import Faulty

ROOT = Path(__file__).resolve().parents[2]


async def test_a_closed_run_gets_its_final_event_redelivered(store: AnyStore, session: str) -> None:
    """[E2] for a closed run: validate the lifecycle, send the exact stored final event again."""
    runtime = chat_runtime(store, ScriptedModel([reply("hi")]))
    out = await runtime.agent_client("chat").run(session, [user_message("hello")])
    sink = QueueSink()
    later = Runtime(store, stream=sink)
    done = await later.ensure_run_completion(out.run_id)
    last = (await records(store, out.run_id))[-1]
    assert done.record == last
    assert done.status is RunStatus.COMPLETED
    assert not done.repaired
    assert done.delivered
    assert [e.key for e in sink.events] == [f"{out.run_id}/run_completed"]
    assert isinstance(sink.events[0], events.RunCompleted)
    assert await later.ensure_run_completion(out.run_id) == done  # again: nothing changes


async def test_a_stream_is_required_while_the_session_is_active(
    store: AnyStore, session: str
) -> None:
    """[E2] no stream and an active session is an error; an ended session skips delivery."""
    runtime = chat_runtime(store, ScriptedModel([reply("hi")]))
    out = await runtime.agent_client("chat").run(session, [user_message("hello")])
    with pytest.raises(ValidationError, match="stream") as e:
        await Runtime(store).ensure_run_completion(out.run_id)
    why = str(e.value)  # says why, and what to pass
    assert out.run_id in why
    assert session in why
    assert "Runtime(store, stream=" in why
    assert "end_session" in why
    assert e.value.field == "stream"
    await store.end_session(session, ended_at=now_ms())
    done = await Runtime(store).ensure_run_completion(out.run_id)
    assert done.record is not None
    assert not done.delivered


async def test_a_run_still_going_is_left_alone(store: AnyStore, session: str) -> None:
    """[E2] while the engine reports the workflow running, nothing is written."""
    called, release = asyncio.Event(), asyncio.Event()

    class Waiting(ScriptedModel):
        async def complete(self, request):  # type: ignore[no-untyped-def]
            called.set()
            await release.wait()
            return await super().complete(request)

        async def stream(self, request):  # type: ignore[no-untyped-def,override]
            called.set()
            await release.wait()
            async for event in super().stream(request):
                yield event

    runtime = chat_runtime(store, Waiting([reply("late")]))
    handle = await runtime.agent_client("chat").start(session, [user_message("hi")])
    await asyncio.wait_for(called.wait(), HANG_GUARD)  # the run is inside its model call
    done = await runtime.ensure_run_completion(handle.run_id)
    assert done.status is RunStatus.RUNNING
    assert done.record is None
    release.set()
    assert (await handle.wait()).status is RunStatus.COMPLETED


async def test_a_workflow_that_could_not_write_its_terminal(store: AnyStore, session: str) -> None:
    """[E2] the engine reports the workflow closed (failed) while the store says running:
    the repair stores a failed terminal stamped with the engine's closing time."""
    faulty = Faulty(store, "record_run_terminal", 10**6, TransientError("disk full"))
    engine = InProcessEngine(RetryPolicy(initial_interval=0.001, maximum_interval=0.001))
    runtime = Runtime(faulty, engine=engine, stream=QueueSink())
    runtime.register_model("m", ScriptedModel([reply("hi")]))
    from agentledger.runtime import Agent, ModelPlanner

    runtime.register_agent(Agent("chat", ModelPlanner("m")))
    handle = await runtime.agent_client("chat").start(session, [user_message("hello")])
    with pytest.raises(TransientError):
        await handle.wait()
    assert (await store.load_run(handle.run_id)).status is RunStatus.RUNNING
    repair = Runtime(store, engine=engine, stream=QueueSink())
    done = await repair.ensure_run_completion(handle.run_id)
    assert done.repaired
    assert done.status is RunStatus.FAILED
    assert done.record is not None
    info = await engine.describe(handle.run_id)
    assert info is not None
    assert done.record.timestamp == info.closed_at
    failure = payloads.RunCompleted.decode(done.record.payload).failure
    assert failure is not None
    assert failure.kind == "workflow_failed"
    assert (await repair.ensure_run_completion(handle.run_id)).record == done.record


async def _dangling_run(store: AnyStore, session: str, *, cancel: str = "") -> str:
    """A run left running by a dead worker: a tool_use without a result (and an intent)."""
    run = RunStart(run_id="lost-1", agent_id="chat", session_id=session, started_at=now_ms())
    builder = RecordBuilder(run, turn_id="t1")
    await store.start_root_run(builder.root_start())
    use = Message(role="assistant", parts=(ToolUsePart(id="u1", name="slow", input={}),))
    for spec in (
        RecordSpec.appended("input", Message(role="user", parts=(TextPart(text="go"),))),
        RecordSpec.appended("turn:1:assistant", use),
        RecordSpec.scheduled("turn:1", "u1", "slow", {}),
    ):
        await store.append_run_record(
            builder.record(spec.type, spec.payload, event_key=spec.event_key, at=now_ms())
        )
    if cancel:
        await store.record_run_cancellation(builder.cancellation(cancel, at=now_ms()))
    return run.run_id


@pytest.mark.parametrize("cancel", ["", "user pressed stop"], ids=["lost", "lost-after-cancel"])
async def test_a_lost_workflow_gets_one_final_record(
    store: AnyStore, session: str, cancel: str
) -> None:
    """[E2] [C1] unknown to the engine: dangling tool_uses get interrupted results, then a
    failed (or, with a recorded intent, canceled) terminal at the last record's time."""
    run_id = await _dangling_run(store, session, cancel=cancel)
    last_time = (await records(store, run_id))[-1].timestamp
    runtime = Runtime(store, stream=QueueSink())
    done = await runtime.ensure_run_completion(run_id)
    assert done.repaired
    assert done.record is not None
    assert done.record.timestamp == last_time
    completed = payloads.RunCompleted.decode(done.record.payload)
    if cancel:
        assert done.status is RunStatus.CANCELED
        assert completed.cancellation is not None
        assert completed.cancellation.reason == cancel
    else:
        assert done.status is RunStatus.FAILED
        assert completed.failure is not None
        assert completed.failure.kind == "workflow_lost"
    assert (await types(store, run_id))[-3:] == [
        "tool_result_received",
        "transcript_messages_appended",
        "run_completed",
    ]
    result = (await valid_transcript(store, run_id))[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    count = len(await records(store, run_id))
    again = await Runtime(store, stream=QueueSink()).ensure_run_completion(run_id)
    assert again.record == done.record
    assert not again.repaired
    assert len(await records(store, run_id)) == count


async def test_corrupt_stored_data_is_reported(store: AnyStore, session: str) -> None:
    """[J1] [E2] a stored transcript record that does not decode raises CorruptRecordError.

    A store refuses such a record on write [R1], so it is planted as a buggy
    writer would leave it: in the file, checksum and all (SQLite only).
    """
    run = RunStart(run_id="bad-1", agent_id="chat", session_id=session, started_at=now_ms())
    builder = RecordBuilder(run)
    await store.start_root_run(builder.root_start())
    bad = builder.record("transcript_messages_appended", b'{"x": 1}', event_key="bad", at=now_ms())
    with pytest.raises(ValidationError):
        await store.append_run_record(bad)
    good = builder.record("transcript_messages_appended", b"[]", event_key="bad", at=now_ms())
    await store.append_run_record(good)
    await store.record_run_terminal(builder.terminal(RunStatus.COMPLETED, at=now_ms()))
    if not isinstance(store, SQLiteStore):
        return
    with sqlite3.connect(store.path) as conn:
        query = "UPDATE records SET payload = ? WHERE run_id = 'bad-1' AND seq = 2"
        conn.execute(query, (b'{"x": 1}',))
        _backfill_checksums(conn)
    conn.close()
    with pytest.raises(CorruptRecordError):
        await Runtime(store, stream=QueueSink()).ensure_run_completion("bad-1")


async def test_a_killed_worker_is_recovered(tmp_path: Path) -> None:
    """[E2] a worker process is SIGKILLed inside a tool; afterwards ensure_run_completion
    gives the run exactly one final record, a second call is an exact retry, and the
    transcript validates."""
    path = tmp_path / "crash.db"
    store = await SQLiteStore.open(path)
    try:
        await store.create_session("s1", created_at=now_ms())
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        worker = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "tests.runtime.crash_worker", str(path), "s1", "crash-1"],
            cwd=ROOT,
            env=env,
        )
        try:
            deadline = time.monotonic() + HANG_GUARD
            while "tool_call_scheduled" not in await _types_or_none(store, "crash-1"):
                assert worker.returncode is None, "the worker died on its own"
                assert time.monotonic() < deadline, "the worker never reached its tool"
                await asyncio.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGKILL)
            await asyncio.wait_for(worker.wait(), 10)
        assert (await store.load_run("crash-1")).status is RunStatus.RUNNING
        runtime = Runtime(store, stream=QueueSink())
        first = await runtime.ensure_run_completion("crash-1")
        second = await Runtime(store, stream=QueueSink()).ensure_run_completion("crash-1")
        assert first.repaired
        assert not second.repaired
        assert first.record == second.record
        kinds = await types(store, "crash-1")
        assert kinds.count("run_completed") == 1
        assert kinds[-1] == "run_completed"
        assert (await store.load_run("crash-1")).status is RunStatus.FAILED
        await valid_transcript(store, "crash-1")
    finally:
        await store.close()


async def _types_or_none(store: SQLiteStore, run_id: str) -> list[str]:
    try:
        return await types(store, run_id)
    except RunNotFoundError:  # the worker has not started the run yet
        return []
