"""Replay: the checked-in histories of every scenario replay on today's workflow code.

Each file in ``histories/`` is a run recorded by ``histories/regenerate.py``
on the real server. ``Replayer`` runs the current workflow code against it
with no server and no activities: any change in what the code asks for, in
what order (a new activity, a moved one, a child started differently, a
timestamp taken elsewhere), is a nondeterminism error, meaning runs in
flight during a deploy would break. If such a change is intended, say so in
the commit and regenerate the histories.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from agentledger.engine.temporal import create_replayer, data_converter
from agentledger.engine.temporal.worker import warm_types, workflow_runner
from tests.engine.temporal.broken_workflows import ReorderedRunWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"
SCENARIOS = {
    "tool_loop",
    "one_tool",
    "child_run",
    "suspend_resume",
    "cancel_with_reason",
    "engine_cancel",
    "ended_session",
    "planner_failure",
    "failed_start",
    "nested_suspension",
}
# No loop_bug history: a bug in the run loop now fails the workflow task and the run waits
# (test_loop_failures.py), so such a workflow never closes and has no history to check in.
REGENERATE = "python -m tests.engine.temporal.histories.regenerate"


def _load(path: Path) -> WorkflowHistory:
    document = json.loads(path.read_text())
    return WorkflowHistory.from_json(document["workflow_id"], document["history"])


FILES = sorted(HISTORIES.glob("*.json"))
RETIRED = HISTORIES / "v1" / "tool_loop__root.json"
"""A run of the retired ``agentledger.run`` shape (13 activities for a one-tool run)."""
EARLIER = sorted((HISTORIES / "v2").glob("*.json"))
"""Runs of ``agentledger.run.v2`` recorded before planner turns suspended the run themselves
(the loop then suspended it with a ``suspend_run`` local activity)."""


def test_every_scenario_has_a_recorded_history() -> None:
    """The histories cover the runtime's scenarios (and child and continuation workflows)."""
    recorded = {json.loads(p.read_text())["scenario"] for p in FILES}
    assert recorded == SCENARIOS, f"missing histories: run {REGENERATE}"
    assert len(FILES) >= len(SCENARIOS) + 2  # a child and a continuation have their own


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
async def test_history_replays_on_current_code(path: Path) -> None:
    """Today's workflow code makes exactly the recorded decisions [X1]."""
    result = await create_replayer().replay_workflow(_load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, (
        f"{path.name} no longer replays: {result.replay_failure!r}. If the workflow change is "
        f"intended (no runs in flight must survive it), run {REGENERATE} and commit the files."
    )


@pytest.mark.parametrize("path", EARLIER, ids=[p.stem for p in EARLIER])
async def test_a_history_of_the_earlier_v2_shape_still_replays(path: Path) -> None:
    """A run in flight across the upgrade: its planner turn left the await to the loop
    (its recorded output says so), and today's loop still suspends it the earlier way."""
    history = _load(path)
    kinds = [e.marker_recorded_event_attributes.marker_name for e in history.events]
    assert kinds.count("core_local_activity") == 2  # begin_run, then suspend_run
    result = await create_replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)


UNFUSED = sorted((HISTORIES / "unfused").glob("*.json"))
"""Every scenario as recorded before a planner turn's activity ran the plan's lone tool call
(no ``agentledger.plan_and_call`` patch marker: each call in an activity of its own)."""


def _activity_types(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


@pytest.mark.parametrize("path", UNFUSED, ids=[p.stem for p in UNFUSED])
async def test_a_history_from_before_lone_calls_ran_in_the_turn_still_replays(path: Path) -> None:
    """A run in flight across the upgrade keeps its shape: planner turn, then the call."""
    history = _load(path)
    assert "agentledger.plan_turn_and_call" not in _activity_types(history)
    result = await create_replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)


PLAN_AND_CALL_SHAPE = sorted((HISTORIES / "plan_and_call").glob("*.json"))
"""Every scenario as recorded while a planner turn's activity ran the plan's lone tool call
but not the planner turn after it (``BeganRun`` without ``turns_after_calls``)."""


@pytest.mark.parametrize("path", PLAN_AND_CALL_SHAPE, ids=[p.stem for p in PLAN_AND_CALL_SHAPE])
async def test_a_history_from_before_turns_ran_after_their_call_still_replays(path: Path) -> None:
    """A run in flight across the upgrade keeps its shape: the turn after a lone call in an
    activity of its own."""
    history = _load(path)
    result = await create_replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)


def test_today_s_histories_run_lone_calls_in_the_turn() -> None:
    """The recorded shape: the planner turn's activity runs a lone call (cancel scenarios);
    parallel calls keep their own activities (tool loop)."""
    names = {p.name for p in FILES}
    assert {p.name for p in UNFUSED} == names - {"one_tool__root.json"}
    assert {p.name for p in PLAN_AND_CALL_SHAPE} == names
    cancel = _activity_types(_load(HISTORIES / "cancel_with_reason__root.json"))
    assert cancel == ["agentledger.plan_turn_and_call"]
    loop = _activity_types(_load(HISTORIES / "tool_loop__root.json"))
    assert loop.count("agentledger.tool_call") == 2
    before = _activity_types(_load(HISTORIES / "unfused" / "cancel_with_reason__root.json"))
    assert before == ["agentledger.plan_turn", "agentledger.tool_call"]


def test_today_s_histories_run_the_turn_after_a_lone_call_in_its_activity() -> None:
    """A one-tool run: one activity for the planner turn, its call and the turn after it;
    before, the turn after the call had an activity of its own."""
    now = _activity_types(_load(HISTORIES / "one_tool__root.json"))
    assert now == ["agentledger.plan_turn_and_call"]
    before = _activity_types(_load(HISTORIES / "plan_and_call" / "one_tool__root.json"))
    assert before == ["agentledger.plan_turn_and_call", "agentledger.plan_turn_and_call"]


async def test_a_nondeterministic_change_fails_replay() -> None:
    """The guard works: a workflow that moved one activity cannot replay the tool loop."""
    warm_types()
    replayer = Replayer(
        workflows=[ReorderedRunWorkflow],
        data_converter=data_converter,
        workflow_runner=workflow_runner(),
    )
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(_load(HISTORIES / "tool_loop__root.json"))


async def test_a_history_of_the_retired_shape_is_refused_clearly() -> None:
    """A run started by the old shape is not half-replayed: its workflow task fails with
    an error naming its type and what to do (finish it on an old worker, or close it)."""
    assert (
        json.loads(RETIRED.read_text())["history"]["events"][0][
            "workflowExecutionStartedEventAttributes"
        ]["workflowType"]["name"]
        == "agentledger.run"
    )
    result = await create_replayer().replay_workflow(_load(RETIRED), raise_on_replay_failure=False)
    failure = result.replay_failure
    assert failure is not None
    assert "RetiredWorkflowType" in str(failure), repr(failure)
    assert "agentledger.run.v2" in str(failure)
    assert "ensure_run_completion" in str(failure)
