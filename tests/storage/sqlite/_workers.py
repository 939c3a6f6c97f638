"""Code that runs in child processes (spawn) for the process race and crash tests.

Kept apart from the test modules so a spawned interpreter imports only this
and the package, not pytest's collection of a test file.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from datetime import UTC, datetime, timedelta
from typing import Any

from agentledger.errors import AgentledgerError
from agentledger.storage import Checkpoint, RecordBuilder, RunStart, RunStatus
from agentledger.storage.sqlite import SQLiteStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TERMINALS = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)


def at(ms: int) -> datetime:
    """A fixed time, equal in every process."""
    return T0 + timedelta(milliseconds=ms)


def run_start(run_id: str, session_id: str, **kw: Any) -> RunStart:
    """The identity every process builds for ``run_id``."""
    return RunStart(run_id=run_id, agent_id="agent", session_id=session_id, started_at=at(1), **kw)


# ------------------------------------------------------------------------ races


async def _race_op(store: SQLiteStore, hasty: SQLiteStore, kind: str, target: str, me: int) -> Any:
    """One contender's call in race ``kind`` on ``target`` (a run id); each differs by ``me``."""
    session = f"{target}-session"
    if kind == "start":
        run = RecordBuilder(run_start(target, session, labels={"writer": str(me)}))
        return await store.start_root_run(run.root_start())
    if kind == "cancel":
        run = RecordBuilder(run_start(target, session))
        return await store.record_run_cancellation(run.cancellation(f"reason-{me}", at=at(2)))
    if kind == "successor":
        run = RecordBuilder(run_start(f"{target}-next-{me}", session, predecessor_run_id=target))
        return await store.start_root_run(run.root_start())
    if kind == "terminal":
        run = RecordBuilder(run_start(target, session))
        status = TERMINALS[me % len(TERMINALS)]
        terminal = run.terminal(status, at=at(3), event_key=f"run_completed-{me}")
        return await store.record_run_terminal(terminal)
    if kind == "locked":  # the parent holds the write lock for a while
        outcomes = []
        for handle in (hasty, store):
            try:
                outcomes.append(await handle.create_session(f"{target}-{me}", created_at=at(4)))
            except AgentledgerError as e:
                outcomes.append(e)
        return outcomes
    raise AssertionError(f"unknown race {kind!r}")


async def _race(path: str, me: int, barrier: Any, plan: list[tuple[str, str]], out: Any) -> None:
    store = await SQLiteStore.open(path, busy_timeout=30)
    hasty = await SQLiteStore.open(path, busy_timeout=0.2)
    try:
        for number, (kind, target) in enumerate(plan):
            barrier.wait()
            try:
                outcome: Any = await _race_op(store, hasty, kind, target, me)
            except AgentledgerError as e:
                outcome = e
            except BaseException as e:  # anything else is a leak the test reports
                outcome = ("leaked", type(e).__module__, type(e).__name__, str(e))
            out.put((number, me, outcome))
    finally:
        await store.close()
        await hasty.close()


def race_worker(path: str, me: int, barrier: Any, plan: list[tuple[str, str]], out: Any) -> None:
    """Entry point of a racing process: one call per race, all released by ``barrier``."""
    try:
        asyncio.run(_race(path, me, barrier, plan, out))
    except BaseException:
        traceback.print_exc()
        barrier.abort()
        raise


# ------------------------------------------------------------------------ crashes


async def _lifecycle_stream(path: str, tag: str, ready: Any) -> None:
    """Start, append, suspend, continue, cancel, end and purge, forever, as fast as it goes."""
    async with await SQLiteStore.open(path) as store:
        ready.set()
        clock = 0

        def tick() -> datetime:
            nonlocal clock
            clock += 1
            return at(clock)

        for n in range(1_000_000):
            sid = f"{tag}-s{n}"
            await store.create_session(sid, created_at=tick())
            root = RecordBuilder(
                RunStart(run_id=f"{sid}-root", agent_id="a", session_id=sid, started_at=tick())
            )
            await store.start_root_run(root.root_start())
            for i in range(3):
                note = root.record("planner_note", b'{"i": %d}' % i, event_key=f"n{i}", at=tick())
                await store.append_run_record(note)
            await store.start_root_run(root.root_start())  # an exact retry
            child = RecordBuilder(
                RunStart(
                    run_id=f"{sid}-child",
                    agent_id="b",
                    session_id=sid,
                    parent_run_id=root.run.run_id,
                    started_at=tick(),
                )
            )
            cmd = child.child_start(parent_agent_id="a", tool_name="t", tool_call_id=f"c{n}")
            await store.start_child_run(cmd)
            cancel = child.cancellation("stop", at=tick())
            await store.record_run_cancellation(cancel)
            canceled = child.terminal(RunStatus.CANCELED, at=tick(), reason="stop")
            await store.record_run_terminal(canceled)
            checkpoint = Checkpoint(id=f"cp{n}", data=os.urandom(64))
            await store.record_run_suspension(root.suspension(checkpoint, at=tick()))
            successor = RecordBuilder(
                RunStart(
                    run_id=f"{sid}-next",
                    agent_id="a",
                    session_id=sid,
                    predecessor_run_id=root.run.run_id,
                    started_at=tick(),
                )
            )
            await store.start_root_run(successor.root_start())
            note = successor.record("planner_note", b"{}", event_key="n", at=tick())
            await store.append_run_record(note)
            await store.record_run_terminal(successor.terminal(RunStatus.COMPLETED, at=tick()))
            await store.end_session(sid, ended_at=tick())
            if n % 3 == 0:
                await store.purge_session(sid)


def crash_worker(path: str, tag: str, ready: Any) -> None:
    """Entry point of the process the crash test kills; sets ``ready`` once the store is open."""
    asyncio.run(_lifecycle_stream(path, tag, ready))
