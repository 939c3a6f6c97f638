"""The state of one run's loop and the writes that suspend or end it.

:class:`LoopState` holds what the run loop (:mod:`.workflow`) knows between
activities: the run, its turn, the tool calls without results, the records it
owes (written with the next activity that writes), and how a run suspends
(a checkpoint) or ends (its terminal record, with the owed ones).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from agentledger.engine.base import (
    WorkflowCanceled,
    WorkflowContext,
)
from agentledger.runtime.checkpoint import (
    CHECKPOINT_VERSION,
    Awaiting,
    ChildWait,
    CrashLoop,
    InDoubtToolCall,
    RunCheckpoint,
    step_checkpoint,
)
from agentledger.runtime.planner import (
    Await,
    RenderedPrompt,
    ToolCall,
    ToolOutcome,
)
from agentledger.runtime.records import RecordSpec
from agentledger.runtime.steps import (
    INTERRUPTED,
    NOT_RUN,
    CrashLooped,
    Fail,
    StepWaits,
    effect_of,
    interrupted,
)
from agentledger.runtime.tools import idempotency_key
from agentledger.runtime.wire import (
    APPEND_RECORDS,
    COMPLETE_RUN,
    SUSPEND_RUN,
    AgentPlan,
    AppendRecordsInput,
    AppendRecordsOutput,
    CompleteRunInput,
    CompleteRunOutput,
    RunInput,
    RunOutput,
    SuspendRunInput,
)
from agentledger.storage.payloads import Failure
from agentledger.storage.types import RunStart, RunStatus
from agentledger.transcript import Message, TextPart, ToolResultPart

__all__ = ["LoopState"]


class LoopState:
    """The state of one run's workflow: its identity, turn and unanswered tool calls; the
    records it owes, and the writes that suspend or end it."""

    def __init__(self, ctx: WorkflowContext, inp: RunInput) -> None:
        self.ctx = ctx
        self.inp = inp
        self.run_start = RunStart(
            run_id=inp.run_id,
            agent_id=inp.agent_id,
            session_id=inp.session_id,
            parent_run_id=inp.parent_run_id,
            predecessor_run_id=inp.predecessor_run_id,
            started_at=ctx.now(),
            labels=dict(inp.labels),
        )
        self.turn = 0
        self.agent = AgentPlan(max_turns=1)
        self.prompt: RenderedPrompt | None = None
        self.pending: tuple[ToolCall, ...] = ()  # tool uses recorded without results yet
        self.pending_step = ""
        self.recorded: dict[str, ToolOutcome] = {}  # pending calls whose result is recorded
        self.session_ended = False
        self.owed: list[RecordSpec] = []  # decided, not yet written
        self.owed_at: datetime | None = None
        self.origin = ""  # the run that scheduled the pending step's calls ("" = this one)
        self.attempts: dict[str, int] = {}  # attempts of a call made by earlier runs
        self.started_at: dict[str, datetime] = {}  # once calls: their started record's time
        self.turn_at: datetime | None = None  # when the last planner turn's plan was recorded
        # a planner turn whose phase an earlier activity recorded (the start, a lone tool
        # call), and when: that turn has nothing more to write before it plans
        self.phase_written: tuple[int, datetime] | None = None
        self.settled = False  # the lone call's activity recorded its step's results message

    # ------------------------------------------------------------------ helpers

    def _output(self, status: RunStatus, **fields: object) -> RunOutput:
        return RunOutput(
            run_id=self.inp.run_id,
            agent_id=self.inp.agent_id,
            session_id=self.inp.session_id,
            turn_id=self.inp.turn_id,
            status=status,
            finished_at=self.ctx.now(),
            **fields,  # type: ignore[arg-type]
        )

    def _owe(self, specs: Iterable[RecordSpec]) -> None:
        """Records to write with the next activity that writes (stamped now)."""
        records = list(specs)
        if records and not self.owed:
            self.owed_at = self.ctx.now()
        self.owed += records

    def _paid(self) -> None:
        """The owed records are written."""
        self.owed, self.owed_at = [], None

    def _effect(self, call: ToolCall) -> Literal["retry", "keyed", "once"]:
        return effect_of(self.agent.effects, call.name)

    def _key(self, call: ToolCall) -> str:
        """The call's idempotency key: from the run that scheduled it, carried on."""
        return idempotency_key(self.origin or self.inp.run_id, call.id)

    async def _flush(self) -> None:
        """Write the owed records now (before work that needs them in the log)."""
        if self.owed:
            assert self.owed_at is not None
            arg = AppendRecordsInput(
                run=self.run_start,
                turn_id=self.inp.turn_id,
                at=self.owed_at,
                records=tuple(self.owed),
            )
            out = await self.ctx.activity(APPEND_RECORDS, arg, AppendRecordsOutput)
            self._paid()
            self.session_ended = self.session_ended or out.session_ended

    def _check_cancel(self) -> None:
        """A safe point: stop here if the run is being canceled or its session ended [D2]."""
        if self.ctx.cancel_requested():
            raise WorkflowCanceled()
        if self.session_ended:
            raise Fail(
                Failure(message="the session ended while the run was going", kind="session_ended")
            )

    # ------------------------------------------------------------------ results

    async def _record_results(
        self,
        step: str,
        calls: tuple[ToolCall, ...],
        outcomes: tuple[ToolOutcome, ...],
        text: str = "",
    ) -> None:
        """Each result as a record, then one user message holding them all (then ``text``).

        Results already recorded (``self.recorded``) are not written again.
        """
        parts: list[TextPart | ToolResultPart] = [
            ToolResultPart(tool_use_id=o.tool_call_id, content=o.content, is_error=o.is_error)
            for o in outcomes
        ]
        if text:
            parts.append(TextPart(text=text))
        self._owe(
            [
                *(
                    RecordSpec.result(step, c.id, c.name, o.content, o.is_error)
                    for c, o in zip(calls, outcomes, strict=True)
                    if c.id not in self.recorded
                ),
                RecordSpec.appended(
                    f"{step}:tool_results", Message(role="user", parts=tuple(parts))
                ),
            ]
        )
        self.pending, self.recorded = (), {}

    async def _close_pending(self, text: str) -> None:
        """Give every unanswered tool_use an error result, so the transcript stays valid."""
        if not self.pending:
            return
        calls = self.pending
        await self._record_results(
            self.pending_step,
            calls,
            tuple(self.recorded.get(c.id) or interrupted(c, text) for c in calls),
        )

    # ------------------------------------------------------------------ endings

    def _suspended(self, awaiting: Await) -> RunOutput:
        asked = Awaiting.of(awaiting, run_id=self.inp.run_id, agent_id=self.inp.agent_id)
        return self._output(RunStatus.SUSPENDED, awaiting=asked)

    async def _suspend(self, awaiting: Await) -> RunOutput:
        self._check_cancel()
        checkpoint = RunCheckpoint(
            version=CHECKPOINT_VERSION,
            agent_id=self.inp.agent_id,
            turn=self.turn,
            awaiting=awaiting,
        )
        await self._write_suspension(checkpoint)
        return self._suspended(awaiting)

    async def _write_suspension(self, checkpoint: RunCheckpoint) -> None:
        """[L6] the owed records, the checkpoint and ``run_suspended``: one activity."""
        arg = SuspendRunInput(
            run=self.run_start,
            turn_id=self.inp.turn_id,
            at=self.ctx.now(),
            checkpoint=checkpoint,
            records=tuple(self.owed),
            records_at=self.owed_at,
        )
        await self.ctx.activity(SUSPEND_RUN, arg, type(None))
        self._paid()

    async def _suspend_for_children(self, waiting: StepWaits) -> RunOutput:
        """Suspend because child runs wait or once calls are in doubt; the first call in
        doubt (else the first child's question) is the run's question."""
        return await self._suspend_step(
            waiting.calls, waiting.results, waiting.children, waiting.in_doubt, waiting.text
        )

    async def _pause(self, looped: CrashLooped) -> RunOutput:
        """Suspend with a ``crash_loop`` checkpoint: the step's state, what kept dying."""
        return await self._suspend_step(
            looped.calls,
            looped.results,
            looped.children,
            looped.in_doubt,
            looped.text,
            looped.crash_loop,
        )

    async def _suspend_step(
        self,
        calls: tuple[ToolCall, ...],
        results: tuple[ToolOutcome, ...],
        children: tuple[ChildWait, ...],
        in_doubt: tuple[InDoubtToolCall, ...],
        text: str,
        crash_loop: CrashLoop | None = None,
    ) -> RunOutput:
        """Suspend with a waiting step's checkpoint; its first question is the run's."""
        self._check_cancel()
        checkpoint = step_checkpoint(
            agent_id=self.inp.agent_id,
            turn=self.turn,
            calls=calls,
            results=results,
            children=children,
            in_doubt=in_doubt,
            text=text,
            origin_run_id=self.origin,
            crash_loop=crash_loop,
        )
        await self._write_suspension(checkpoint)
        asked = checkpoint.asked(run_id=self.inp.run_id, agent_id=self.inp.agent_id)
        return self._output(RunStatus.SUSPENDED, awaiting=asked)

    async def _complete(self, status: RunStatus, failure: Failure | None = None) -> str:
        arg = CompleteRunInput(
            run=self.run_start,
            turn_id=self.inp.turn_id,
            at=self.ctx.now(),
            status=status,
            failure=failure,
            records=tuple(self.owed),
            records_at=self.owed_at,
        )
        out = await self.ctx.activity(COMPLETE_RUN, arg, CompleteRunOutput)
        self._paid()
        return out.cancellation_reason

    async def _end_completed(self, final: Message) -> RunOutput:
        await self._complete(RunStatus.COMPLETED)
        return self._output(RunStatus.COMPLETED, final=final)

    async def _end_canceled(self) -> RunOutput:
        await self._close_pending(INTERRUPTED)
        reason = await self._complete(RunStatus.CANCELED)
        return self._output(RunStatus.CANCELED, cancellation_reason=reason)

    async def _end_failed(self, failure: Failure) -> RunOutput:
        await self._close_pending(NOT_RUN)
        await self._complete(RunStatus.FAILED, failure)
        return self._output(RunStatus.FAILED, failure=failure)
