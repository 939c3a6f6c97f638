"""A run workflow whose code changed incompatibly: what the replay test must catch.

Same workflow type name as the real one; its loop writes (no) records
through a task-queue activity *before* starting the run, i.e. its first
command differs from the recorded histories'. The
sandbox re-imports this module; it imports only pure code.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentledger.engine.temporal.options import EngineOptions
    from agentledger.engine.temporal.workflows import WORKFLOW_NAME, TemporalContext, drive
    from agentledger.runtime.wire import (
        APPEND_RECORDS,
        AppendRecordsInput,
        AppendRecordsOutput,
        RunInput,
        RunOutput,
    )
    from agentledger.runtime.workflow import run_workflow
    from agentledger.storage.types import RunStart


async def _reordered(ctx: TemporalContext, inp: RunInput) -> RunOutput:
    run = RunStart(
        run_id=inp.run_id,
        agent_id=inp.agent_id,
        session_id=inp.session_id,
        started_at=ctx.now(),
        labels=dict(inp.labels),
    )
    await ctx.activity(
        APPEND_RECORDS,
        AppendRecordsInput(run=run, turn_id=inp.turn_id, at=ctx.now(), records=()),
        AppendRecordsOutput,
        interruptible=True,  # so a (remote) activity, where the history has begin_run's marker
    )
    return await run_workflow(ctx, inp)


@workflow.defn(name=WORKFLOW_NAME)
class ReorderedRunWorkflow:
    """The run workflow with one activity moved: not replay-compatible."""

    @workflow.run
    async def run(self, inp: RunInput, options: EngineOptions) -> RunOutput:
        ctx = TemporalContext(options)
        return await drive(ctx, _reordered(ctx, inp))
