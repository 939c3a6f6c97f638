"""Runs paused by a crash loop, for the inspector's tests.

Only an engine that outlives its workers (Temporal) sees a turn keep killing
its worker; in process a crash ends every attempt with the process. So these
runs are written the way the run loop writes one that paused (the records of
tests/engine/temporal/test_crash_loop.py, in order), with the runtime's own
checkpoint types and its ``suspension`` command: a real store then holds a
run a host continues with ``resume`` like any other.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from agentledger.runtime.checkpoint import (
    CHECKPOINT_VERSION,
    CrashLoop,
    RunCheckpoint,
    step_checkpoint,
    suspension,
)
from agentledger.runtime.planner import ToolCall
from agentledger.runtime.wire import PLAN_TURN, TOOL_CALL
from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.transcript import Message, TextPart, ToolUsePart, encode_messages

PHASE = "run_phase_changed"


def _said(message: Message) -> bytes:
    return encode_messages([message])


async def seed_crash_loop(
    store: Any,
    *,
    session_id: str,
    run_id: str,
    agent_id: str,
    said: str,
    at: datetime,
    call: ToolCall | None = None,
    attempts: int = 3,
) -> None:
    """A root run of ``session_id`` paused by a crash loop: its first planner turn (no
    ``call``), or the tool call ``call`` of that turn, started ``attempts`` times without
    finishing. ``store`` is a store or a StoreClient (the session exists)."""
    turn = "turn-looping"
    run = RunStart(run_id=run_id, agent_id=agent_id, session_id=session_id, started_at=at)
    records = RecordBuilder(run, turn_id=turn)
    await store.start_root_run(records.root_start())
    ms = timedelta(milliseconds=1)
    user = Message(role="user", parts=(TextPart(text=said),))
    batch = [
        records.record(TRANSCRIPT_APPENDED, _said(user), event_key="input:messages", at=at),
        records.record(PHASE, b'{"phase":"prompted"}', event_key="phase:prompted", at=at + ms),
        records.record(PHASE, b'{"phase":"planning"}', event_key="turn:1:phase:planning",
                       at=at + 2 * ms),
    ]  # fmt: skip
    if call is None:
        checkpoint = RunCheckpoint(
            version=CHECKPOINT_VERSION,
            agent_id=agent_id,
            turn=1,
            crash_loop=CrashLoop(activity=PLAN_TURN, attempts=attempts),
        )
    else:
        use = Message(
            role="assistant", parts=(ToolUsePart(id=call.id, name=call.name, input=call.input),)
        )
        scheduled = {"tool_call_id": call.id, "tool_name": call.name, "input": call.input}
        batch += [
            records.record(TRANSCRIPT_APPENDED, _said(use), event_key="turn:1:assistant:messages",
                           at=at + 3 * ms),
            records.record(PHASE, b'{"phase":"executing_tools"}',
                           event_key="turn:1:phase:executing_tools", at=at + 4 * ms),
            records.record("tool_call_scheduled", msgspec.json.encode(scheduled),
                           event_key=f"turn:1:tool:{call.id}:scheduled", at=at + 5 * ms),
        ]  # fmt: skip
        checkpoint = step_checkpoint(
            agent_id=agent_id,
            turn=1,
            calls=(call,),
            results=(),
            crash_loop=CrashLoop(activity=TOOL_CALL, attempts=attempts, calls=(call,)),
        )
    await store.append_run_records(batch)
    await store.record_run_suspension(suspension(run, turn, at + 9 * ms, checkpoint))
