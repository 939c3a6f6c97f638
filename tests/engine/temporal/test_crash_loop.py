"""A turn whose worker dies on every attempt pauses its run (``crash_loop``), after N starts.

Real worker processes (``agentledger worker``) run a tool or a planner that
SIGKILLs its own process the moment it starts; a supervisor starts a new
worker each time one dies. Temporal notices each lost attempt by its
missing heartbeat (a short heartbeat timeout keeps the test quick) and
retries it; the attempt after the Nth lost one does not run the tool again:
the run suspends with a ``crash_loop`` checkpoint. Starts are counted in a
file outside the store: exactly N lines, not N-1, not N+1. Resuming runs
the work again (now behaving); ``Answer(approved=False)`` ends the run.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from agentledger.engine.temporal.options import CALL_AND_PLAN, PLAN_AFTER_CALL, PLAN_AND_CALL
from agentledger.runtime import Answer, user_message
from agentledger.runtime.completion import check_lifecycle
from agentledger.runtime.wire import PLAN_TURN, TOOL_CALL
from agentledger.storage import RunStatus
from agentledger.storage.protocol import Store
from tests.engine.temporal import crashing
from tests.runtime.support import records, types, valid_transcript

HANG_GUARD = 240.0
"""Seconds a run may take to pause before the test calls it hung (it takes a few)."""


@pytest.mark.parametrize("store_kind", ["sqlite"])
@pytest.mark.parametrize(("agent", "attempts"), [("fragile", 3), ("fragile2", 2), ("fragile1", 1)])
async def test_a_tool_that_kills_its_worker_pauses_the_run_after_n_starts(
    agent: str,
    attempts: int,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """N starts (3 by default, ``max_turn_attempts=2`` or 1), then ``crash_loop``; resume runs
    the call again and completes the run. The first start is in the planner turn's activity
    (it runs the plan's lone call): its loss counts against the call, not the planner turn."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        client = s.client_for[agent]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert crashing.count(s.counter, "fragile") == attempts
        assert out.awaiting is not None
        assert out.awaiting.kind == "crash_loop"
        assert out.awaiting.activity == TOOL_CALL
        assert out.awaiting.attempts == attempts
        assert [c.id for c in out.awaiting.calls] == ["c1"]
        assert f"started {attempts} times" in out.awaiting.question
        assert out.awaiting.run_id == handle.run_id
        assert await types(store, handle.run_id) == [
            "run_started",
            "transcript_messages_appended",
            "phase:prompted",
            "phase:planning",
            "transcript_messages_appended",
            "phase:executing_tools",
            "tool_call_scheduled",
            "run_suspended",
        ]
        check_lifecycle(await store.load_run(handle.run_id), await records(store, handle.run_id))
        listed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "agentledger", "--db", worker_db, "runs", s.session],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        shown = listed.stdout
        assert f"suspended (crash_loop: {TOOL_CALL} started {attempts} times)" in shown

        s.mode.write_text("ok")  # the tool behaves now
        done = await asyncio.wait_for(client.resume(s.session, handle.run_id, Answer()), HANG_GUARD)
        assert done.status is RunStatus.COMPLETED, done.failure
        assert done.text == "x done"
        assert crashing.count(s.counter, "fragile") == attempts + 1
        messages = await valid_transcript(store, done.run_id)
        assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_a_paused_step_keeps_its_other_results_and_declining_ends_the_run(
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """Two calls in parallel, one kills its worker: the other's result is recorded with the
    pause; ``Answer(approved=False)`` ends the run failed (``crash_loop``), the looping call
    not started again."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        client = s.client_for["pair"]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.kind == "crash_loop"
        assert [c.id for c in out.awaiting.calls] == ["b"]
        assert crashing.count(s.counter, "fragile") == 3
        kinds = await types(store, handle.run_id)
        assert kinds[-2:] == ["tool_result_received", "run_suspended"]

        ended = await asyncio.wait_for(
            client.resume(s.session, handle.run_id, Answer(approved=False)), HANG_GUARD
        )
        assert ended.status is RunStatus.FAILED
        assert ended.failure is not None
        assert ended.failure.kind == "crash_loop"
        assert crashing.count(s.counter, "fragile") == 3  # not started again
        messages = await valid_transcript(store, ended.run_id)
        results = [p for p in messages[-1].parts if hasattr(p, "tool_use_id")]
        assert [(p.tool_use_id, p.is_error) for p in results] == [  # type: ignore[attr-defined]
            ("a", False),
            ("b", True),
        ]


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_a_planner_turn_that_kills_its_worker_pauses_the_run_and_resume_replans(
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """The planner kills its worker on every start: three starts, ``crash_loop`` naming the
    planner turn; resume plans the turn again and the run completes."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        client = s.client_for["planner"]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.kind == "crash_loop"
        assert out.awaiting.activity == PLAN_TURN
        assert out.awaiting.attempts == 3
        assert out.awaiting.calls == ()
        assert crashing.count(s.counter, "planner") == 3
        assert (await types(store, handle.run_id))[-2:] == ["phase:planning", "run_suspended"]

        s.mode.write_text("ok")
        done = await asyncio.wait_for(client.resume(s.session, handle.run_id, Answer()), HANG_GUARD)
        assert done.status is RunStatus.COMPLETED, done.failure
        assert done.text == "planned"
        assert crashing.count(s.counter, "planner") == 4


@pytest.mark.parametrize("store_kind", ["sqlite"])
@pytest.mark.parametrize(("agent", "calls"), [("resumer", 1), ("resumer2", 2)])
async def test_a_turn_after_a_call_that_kills_its_worker_pauses_as_that_turn(
    agent: str,
    calls: int,
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """The planner turn after a lone call kills its worker on every start; it runs in the
    call's activity first (the planner turn's for a first call, its own for a later one),
    whose lost attempts after the call's result count against that turn: three starts of
    it, ``crash_loop`` naming the planner turn, each call run once."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        client = s.client_for[agent]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.kind == "crash_loop"
        assert out.awaiting.activity == PLAN_TURN
        assert out.awaiting.attempts == 3
        assert crashing.count(s.counter, "resumer") == 3
        assert crashing.count(s.counter, "counted") == calls
        assert (await types(store, handle.run_id))[-4:] == [
            "tool_result_received",
            "transcript_messages_appended",
            "phase:synthesizing",
            "run_suspended",
        ]

        s.mode.write_text("ok")
        done = await asyncio.wait_for(client.resume(s.session, handle.run_id, Answer()), HANG_GUARD)
        assert done.status is RunStatus.COMPLETED, done.failure
        assert done.text == "x counted"
        assert crashing.count(s.counter, "resumer") == 4
        assert crashing.count(s.counter, "counted") == calls


@pytest.mark.parametrize("store_kind", ["sqlite"])
@pytest.mark.parametrize(
    ("agent", "shape"),
    [
        ("resumer", [PLAN_AND_CALL, PLAN_AFTER_CALL]),
        ("resumer2", [PLAN_AND_CALL, CALL_AND_PLAN, PLAN_AFTER_CALL]),
    ],
)
async def test_a_turn_after_a_call_lost_once_is_handed_back_and_planned_again(
    agent: str,
    shape: list[str],
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """The turn after the call kills its worker once: the retry of the call's activity reads
    the call's recorded result and hands the turn back (one lost attempt counted); it runs
    in an activity of its own and the run completes, the call run once."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        s.mode.write_text("once")
        client = s.client_for[agent]
        out = await asyncio.wait_for(client.run(s.session, [user_message("go")]), HANG_GUARD)
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "x counted"
        assert crashing.count(s.counter, "resumer") == 2
        assert crashing.count(s.counter, "counted") == len(shape) - 1
        history = await temporal_client.get_workflow_handle(out.run_id).fetch_history()
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert scheduled == shape
        messages = await valid_transcript(store, out.run_id)
        assert [m.role for m in messages] == ["user", "assistant"] * len(shape)


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_a_child_run_that_crash_loops_pauses_its_parent_and_resume_reaches_it(
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """An agent used as a tool whose tool kills its worker: the child pauses, its parent
    suspends with the child's question; resuming the parent runs the child's call again."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        client = s.client_for["boss"]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.kind == "crash_loop"
        assert out.awaiting.run_id == f"{handle.run_id}.ask"  # the child asks
        assert out.awaiting.activity == TOOL_CALL
        assert crashing.count(s.counter, "fragile") == 3

        s.mode.write_text("ok")
        done = await asyncio.wait_for(client.resume(s.session, handle.run_id, Answer()), HANG_GUARD)
        assert done.status is RunStatus.COMPLETED, done.failure
        assert done.text == "boss: x done"
        assert crashing.count(s.counter, "fragile") == 4


@pytest.mark.parametrize("store_kind", ["sqlite"])
async def test_attempts_that_end_with_a_transient_error_are_not_lost(
    temporal_address: str,
    temporal_client: Client,
    store: Store,
    worker_db: str,
    tmp_path: Path,
) -> None:
    """Two TransientErrors (retried by the policy), then two worker deaths: the run pauses
    after four starts, the two deaths counted (``max_turn_attempts=2``), not after two."""
    async with crashing.crashing_workers(
        temporal_address, temporal_client, store, worker_db, tmp_path
    ) as s:
        client = s.client_for["flaky2"]
        handle = await client.start(s.session, [user_message("go")])
        out = await asyncio.wait_for(handle.wait(), HANG_GUARD)
        assert out.status is RunStatus.SUSPENDED, out.failure
        assert out.awaiting is not None
        assert out.awaiting.kind == "crash_loop"
        assert out.awaiting.attempts == 2
        lines = s.counter.read_text().splitlines()
        assert [line.split(" ")[2] for line in lines] == ["1", "2", "3", "4"]
