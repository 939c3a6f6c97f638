"""THE run loop: one run, from its start to its terminal or suspension record.

Written once, as orchestration over :class:`~agentledger.engine.WorkflowContext`,
so any engine runs it: it does no I/O, reads time only from ``ctx.now()``,
and does every piece of work through an activity (store writes, planner
turns, tool calls) or a child workflow (an agent used as a tool). What it
decides depends only on its input and on activity results, which is what a
replaying engine (Temporal) requires.

A run's records, in order, and the activity that writes them::

    run_started                          begin_run            [L1]-[L4]
    prompt_rendered                      begin_run (if the planner renders one)
    transcript_messages_seeded           begin_run (history given to the run) [R1]
    transcript_messages_appended         begin_run: the user's new message (or the resume answer)
    run_phase_changed  prompted          begin_run
    run_phase_changed  planning          plan_turn: turn 1 (synthesizing on later turns)
    planner_note / model_usage           plan_turn: what the planner reported
    transcript_messages_appended         plan_turn: the assistant message
    run_phase_changed  executing_tools   plan_turn
    tool_call_scheduled ...              plan_turn: one per call (child runs link here [L2])
    tool_result_received ...             one per call, in call order (tool_call, for a lone call)
    transcript_messages_appended         the next activity: the user message holding every result
    ...                                  more turns
    run_completed                        complete_run [L7]
    run_suspended                        plan_turn, when its plan waits for outside input [L6]
                                         (suspend_run, when child runs wait)

So a one-tool run takes five activities: begin, plan, tool, plan, complete
(the first and last only talk to the store; an engine may run them as
local activities). Records the loop decides itself (a results message, the
results of interrupted calls or child runs) are *owed*: they ride along with
the next activity that writes, stamped with the time they were decided.
Each activity writes in one store transaction: its owed records go with
its own (a start, a suspension or the terminal) in one command. A planner
turn writes twice: what it owes before it asks the planner, then the plan,
so the model output it streams live follows everything recorded before it.

A model call is recorded by the planner turn that makes it, and a lone tool
call by its activity, before the activity completes: a retry after a lost
completion finds the record instead of doing the work again. The results of
parallel calls are written together, in call order, after the last one; each
call's activity saves its result privately in the store first, so a retry
after a lost completion does not run its tool again either.

A child run that suspends (an agent used as a tool waits for outside input)
suspends its parent once the step's other calls are in: the parent keeps
their results as records, and its checkpoint names the waiting children.
The parent's continuation answers the first child by continuing it [K1]
(under the continuation, as the child's new parent), then finishes the
step with one user message holding every result, and plans on. A child
that asks again suspends the parent's continuation again.

Cancellation [C1]/[C3] reaches the loop at interruptible awaits and at the
safe points between steps. Tool calls in flight are interrupted and get an
error result, so every tool_use in the transcript has its tool_result; the
terminal record then repeats the recorded reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime

import msgspec

from agentledger.engine.base import (
    ActivityFailed,
    ChildFailed,
    WorkflowCanceled,
    WorkflowContext,
)
from agentledger.errors import RunLoopError
from agentledger.runtime import tracing
from agentledger.runtime.checkpoint import (
    CHECKPOINT_VERSION,
    Awaiting,
    ChildWait,
    RunCheckpoint,
)
from agentledger.runtime.planner import (
    Answer,
    Await,
    AwaitClarification,
    PlanResult,
    RenderedPrompt,
    ToolCall,
    ToolOutcome,
)
from agentledger.runtime.records import Phase, RecordSpec, UsagePayload
from agentledger.runtime.wire import (
    APPEND_RECORDS,
    BEGIN_RUN,
    COMPLETE_RUN,
    PLAN_TURN,
    SUSPEND_RUN,
    TOOL_CALL,
    AgentPlan,
    AppendRecordsInput,
    AppendRecordsOutput,
    BeginRunInput,
    BeginRunOutput,
    CompleteRunInput,
    CompleteRunOutput,
    PlanTurnInput,
    PlanTurnOutput,
    RunInput,
    RunOutput,
    SuspendRunInput,
    ToolCallInput,
    ToolCallOutput,
)
from agentledger.storage.payloads import SESSION_ENDED, Failure
from agentledger.storage.types import RunStart, RunStatus, StartOutcome
from agentledger.transcript import Message, TextPart, ToolResultPart

__all__ = ["INTERRUPTED", "plan_records", "run_workflow"]

INTERRUPTED = "interrupted: the run was canceled before this tool call finished"
"""Content of the error result a tool call in flight gets when its run is canceled."""

_NOT_RUN = "not run: the run failed before this tool call finished"


async def run_workflow(ctx: WorkflowContext, inp: RunInput) -> RunOutput:
    """Run one run to its end and say how it ended.

    Raises:
        ActivityFailed: the start itself failed (nothing was written), or the
            run's final record could not be written (``ensure_run_completion``
            closes such a run later [E2]).
    """
    with tracing.run_span(inp) as span:  # turns and agent tools: span.traced(ctx)
        out = await _Loop(span.traced(ctx), inp).run()
        span.ended(out)
    return out


class _Fail(Exception):
    """The run fails with ``failure`` (planner error, invalid plan, too many turns)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _ChildrenWait(Exception):
    """Child runs of a tool step suspended: the run suspends with the step's state."""

    def __init__(
        self,
        calls: tuple[ToolCall, ...],
        results: tuple[ToolOutcome, ...],
        children: tuple[ChildWait, ...],
        text: str,
    ) -> None:
        super().__init__(f"{len(children)} child run(s) wait for outside input")
        self.calls = calls
        self.results = results
        self.children = children
        self.text = text


def _activity_failure(kind: str, error: ActivityFailed) -> Failure:
    return Failure(
        message=error.reason, kind=kind, code=error.error_type, retryable=error.retryable
    )


def _interrupted(call: ToolCall, text: str = INTERRUPTED) -> ToolOutcome:
    return ToolOutcome(tool_call_id=call.id, tool_name=call.name, content=text, is_error=True)


def _calls(awaiting: Await | None) -> tuple[ToolCall, ...]:
    """The tool calls an await holds (a clarification holds none)."""
    if awaiting is None or isinstance(awaiting, AwaitClarification):
        return ()
    return awaiting.calls


def _await_message(awaiting: Await) -> Message:
    """The assistant message of a suspension, when the planner gave none."""
    if isinstance(awaiting, AwaitClarification):
        return Message(role="assistant", parts=(TextPart(text=awaiting.question),))
    return Message(role="assistant", parts=tuple(c.part() for c in awaiting.calls))


class _Loop:
    """The state of one run's workflow: its identity, turn and unanswered tool calls."""

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
            raise _Fail(
                Failure(message="the session ended while the run was going", kind="session_ended")
            )

    # --------------------------------------------------------------------- run

    async def run(self) -> RunOutput:
        try:
            begin = await self._begin()
        except ActivityFailed as e:
            if not e.retryable:
                raise  # the start was refused: nothing was written
            try:  # the attempts ran out, maybe after the start: end the run if it is there
                return await self._end_failed(_activity_failure("activity_failed", e))
            except ActivityFailed:
                raise e from None
        if begin.outcome is StartOutcome.STOP:  # [C2]: no planner or tool work at all
            return self._output(RunStatus.CANCELED, cancellation_reason=SESSION_ENDED)
        try:
            if begin.failure is not None or begin.agent is None:
                raise _Fail(begin.failure or Failure(message="no agent", kind="activity_failed"))
            self.session_ended = begin.session_ended
            return await self._drive(begin)
        except WorkflowCanceled:
            return await self._end_canceled()
        except _Fail as failed:
            return await self._end_failed(failed.failure)
        except ActivityFailed as e:
            return await self._end_failed(_activity_failure("activity_failed", e))
        except Exception as e:  # a bug in this loop
            if self.ctx.waits_for_fixes:  # Temporal: fail the task, the run waits for a fix
                raise RunLoopError(
                    run_id=self.inp.run_id, error_type=type(e).__name__, reason=str(e)
                ) from e
            failure = Failure(
                message=f"{type(e).__name__}: {e}", kind="workflow_error", code=type(e).__name__
            )
            return await self._end_failed(failure)

    async def _begin(self) -> BeginRunOutput:
        """Start the run and record what it begins with (prompt, history, new message)."""
        continuation = bool(self.inp.predecessor_run_id) or not self.inp.messages
        return await self.ctx.activity(
            BEGIN_RUN,
            BeginRunInput(
                run=self.run_start,
                turn_id=self.inp.turn_id,
                mode=self.inp.mode,
                at=self.ctx.now(),
                parent_agent_id=self.inp.parent_agent_id,
                tool_name=self.inp.tool_name,
                tool_call_id=self.inp.tool_call_id,
                history=() if continuation else self.inp.messages[:-1],
                history_from=None if continuation else self.inp.history_from,
                message=None if continuation else self.inp.messages[-1],
                claim=self.inp.claim,
            ),
            BeginRunOutput,
        )

    async def _drive(self, begin: BeginRunOutput) -> RunOutput:
        try:
            return await self._prepare_and_plan(begin)
        except _ChildrenWait as waiting:
            return await self._suspend_for_children(waiting)

    async def _prepare_and_plan(self, begin: BeginRunOutput) -> RunOutput:
        assert begin.agent is not None
        self.agent = begin.agent
        self.prompt = begin.prompt
        if begin.checkpoint is None:
            _ = self.inp.messages[-1]  # begin_run recorded it (no message: a bug, IndexError)
            return await self._plan_loop(resume=False, results=(), answer=None)
        answer = self.inp.answer or Answer()
        results = await self._take_answer(begin.checkpoint, answer)
        # a child's answer went to the child: this planner sees the step's results
        mine = None if begin.checkpoint.kind == "child" else answer
        return await self._plan_loop(resume=True, results=results, answer=mine)

    async def _take_answer(
        self, checkpoint: RunCheckpoint, answer: Answer
    ) -> tuple[ToolOutcome, ...]:
        """Put the outside input into the transcript: text, tool results, or run the calls."""
        if checkpoint.kind == "child":
            return await self._answer_child(checkpoint, answer)
        if checkpoint.kind == "clarification":
            reply = Message(role="user", parts=(TextPart(text=answer.text),))
            self._owe(
                [RecordSpec.appended("resume:answer", reply), RecordSpec.phase(Phase.PROMPTED)]
            )
            return ()
        calls = checkpoint.pending
        self.pending, self.pending_step = calls, "resume"
        self._owe([RecordSpec.phase(Phase.PROMPTED)])
        if checkpoint.kind == "confirmation" and answer.approved:
            return await self._execute(calls, "resume", answer.text)
        if checkpoint.kind == "confirmation":
            why = f"declined by the user: {answer.text}" if answer.text else "declined by the user"
            outcomes = tuple(_interrupted(c, why) for c in calls)
            await self._record_results("resume", calls, outcomes)
            return outcomes
        outcomes = tuple(
            ToolOutcome(tool_call_id=c.id, tool_name=c.name, content=answer.tool_results[c.id])
            if c.id in answer.tool_results
            else _interrupted(c, "no result was provided for this call")
            for c in calls
        )
        await self._record_results("resume", calls, outcomes, answer.text)
        return outcomes

    async def _answer_child(
        self, checkpoint: RunCheckpoint, answer: Answer
    ) -> tuple[ToolOutcome, ...]:
        """Continue the first waiting child with ``answer``, then finish the suspended step."""
        calls = checkpoint.calls
        self.pending, self.pending_step = calls, "resume"
        # recorded by the predecessor: the results message still needs them
        self.recorded = {o.tool_call_id: o for o in checkpoint.results}
        self._owe([RecordSpec.phase(Phase.PROMPTED)])
        first, *rest = checkpoint.children
        try:
            outcome = await self._child(
                first.call, first.agent_id, predecessor=first.run_id, answer=answer
            )
        except WorkflowCanceled:
            outcome = None
        except ChildFailed as e:
            outcome = _interrupted(first.call, f"agent {first.call.name} failed: {e.reason}")
        waiting = {w.call.id: w for w in rest}
        by_id: dict[str, ToolOutcome | ChildWait | None] = {
            **self.recorded,
            **waiting,
            first.call.id: outcome,
        }
        outcomes = tuple(by_id[c.id] for c in calls)
        return await self._settle("resume", calls, outcomes, checkpoint.text)

    async def _plan_loop(
        self, *, resume: bool, results: tuple[ToolOutcome, ...], answer: Answer | None
    ) -> RunOutput:
        while True:
            self._check_cancel()
            self.turn += 1
            if self.turn > self.agent.max_turns:
                raise _Fail(
                    Failure(
                        message=f"the agent took more than {self.agent.max_turns} planner turns",
                        kind="max_turns_exceeded",
                    )
                )
            phase = Phase.SYNTHESIZING if resume else Phase.PLANNING
            out = await self._plan(resume, results, answer, phase)
            plan = out.result
            assert plan is not None
            if out.suspended and plan.await_ is not None:  # the turn suspended the run [L6]
                return self._suspended(plan.await_)
            step = f"turn:{self.turn}"
            if out.recorded:  # its tool uses (if any) are in the log
                self.pending, self.pending_step = plan.tool_calls or _calls(plan.await_), step
            self._check_cancel()  # a safe point
            if plan.final is not None:
                return await self._end_completed(plan.final)
            if plan.await_ is not None:
                if not out.recorded:  # a planner turn of an earlier version left it to us
                    self._owe(plan_records(self.turn, plan))
                if not isinstance(plan.await_, AwaitClarification):
                    self.pending, self.pending_step = plan.await_.calls, step
                return await self._suspend(plan.await_)
            results = await self._execute(plan.tool_calls, step, scheduled=True)
            resume, answer = True, None

    async def _plan(
        self, resume: bool, results: tuple[ToolOutcome, ...], answer: Answer | None, phase: Phase
    ) -> PlanTurnOutput:
        """One planner turn: the owed records and the phase, then the plan, recorded.

        A plan that waits for outside input comes back ``suspended``: the
        turn recorded it and suspended the run.
        """
        self._owe([RecordSpec.phase(phase, self.turn)])
        assert self.owed_at is not None
        arg = PlanTurnInput(
            run=self.run_start,
            turn_id=self.inp.turn_id,
            turn=self.turn,
            resume=resume,
            at=self.owed_at,
            records=tuple(self.owed),
            prompt=self.prompt,
            tool_results=results,
            answer=answer,
        )
        try:
            out = await self.ctx.activity(PLAN_TURN, arg, PlanTurnOutput, interruptible=True)
        except ActivityFailed as e:
            raise _Fail(_activity_failure("planner_error", e)) from e
        self._paid()
        if out.session_ended:
            self.session_ended = True
            self._check_cancel()
        if out.failure is not None:
            raise _Fail(out.failure)
        if out.result is None:
            raise _Fail(Failure(message="the planner returned nothing", kind="invalid_plan"))
        return out

    # ------------------------------------------------------------------- tools

    async def _execute(
        self, calls: tuple[ToolCall, ...], step: str, text: str = "", *, scheduled: bool = False
    ) -> tuple[ToolOutcome, ...]:
        """Run the calls concurrently; record every result (interrupted ones too).

        Unless the planner turn ``scheduled`` them, the calls are recorded first.
        """
        if not scheduled:
            self._owe(
                [
                    RecordSpec.phase(Phase.EXECUTING_TOOLS, self.turn),
                    *(RecordSpec.scheduled(step, c.id, c.name, c.input) for c in calls),
                ]
            )
            await self._flush()
        # A lone call records its own result; several record theirs together, in call order.
        at = self.ctx.now() if len(calls) == 1 else None
        outcomes = await asyncio.gather(*(self._call(c, step, at) for c in calls))
        return await self._settle(step, calls, tuple(outcomes), text)

    async def _settle(
        self,
        step: str,
        calls: tuple[ToolCall, ...],
        outcomes: tuple[ToolOutcome | ChildWait | None, ...],
        text: str,
    ) -> tuple[ToolOutcome, ...]:
        """Record a finished step's results; or suspend for its waiting children.

        Raises:
            WorkflowCanceled: a call was interrupted (every call has its result).
            _ChildrenWait: child runs wait for outside input (the other results
                are recorded, the results message is not).
        """
        if any(o is None for o in outcomes):
            final = tuple(
                o if isinstance(o, ToolOutcome) else _interrupted(c)
                for c, o in zip(calls, outcomes, strict=True)
            )
            await self._record_results(step, calls, final, text)
            raise WorkflowCanceled()
        children = tuple(o for o in outcomes if isinstance(o, ChildWait))
        done = tuple(o for o in outcomes if isinstance(o, ToolOutcome))
        if children:
            fresh = [o for o in done if o.tool_call_id not in self.recorded]
            by_id = {c.id: c for c in calls}
            self._owe(
                RecordSpec.result(
                    step, o.tool_call_id, by_id[o.tool_call_id].name, o.content, o.is_error
                )
                for o in fresh
            )
            self.recorded.update((o.tool_call_id, o) for o in fresh)
            raise _ChildrenWait(calls, done, children, text)
        await self._record_results(step, calls, done, text)
        return done

    async def _call(
        self, call: ToolCall, step: str, at: datetime | None
    ) -> ToolOutcome | ChildWait | None:
        """One call's outcome (a tool records its own); a waiting child; None if interrupted."""
        try:
            if call.name in self.agent.agent_tools:
                return await self._child(call, self.agent.agent_tools[call.name])
            arg = ToolCallInput(
                run=self.run_start, turn_id=self.inp.turn_id, call=call, step=step, at=at
            )
            out = await self.ctx.activity(TOOL_CALL, arg, ToolCallOutput, interruptible=True)
            if at is not None:
                self.recorded[call.id] = out.outcome
            self.session_ended = self.session_ended or out.session_ended
            return out.outcome
        except WorkflowCanceled:
            return None
        except ActivityFailed as e:
            return _interrupted(call, f"tool {call.name} failed: {e.reason}")
        except ChildFailed as e:
            return _interrupted(call, f"agent {call.name} failed: {e.reason}")

    async def _child(
        self,
        call: ToolCall,
        agent_id: str,
        *,
        predecessor: str = "",
        answer: Answer | None = None,
    ) -> ToolOutcome | ChildWait:
        """Run the agent behind ``call`` as a child run; its final answer is the result.

        With ``predecessor``, the child run continues that suspended child with
        ``answer`` [K1]. A child that suspends comes back as a :class:`ChildWait`.
        """
        messages: tuple[Message, ...] = ()
        if not predecessor:
            request = call.input.get("request")
            if not isinstance(request, str) or not request:
                return _interrupted(
                    call, f'invalid input for agent {call.name}: expected {{"request": "<text>"}}'
                )
            messages = (Message(role="user", parts=(TextPart(text=request),)),)
        await self._flush()  # the parent's log comes first
        child_id = f"{self.inp.run_id}.{call.id}"
        child = RunInput(
            run_id=child_id,
            agent_id=agent_id,
            session_id=self.inp.session_id,
            turn_id=self.inp.turn_id,
            messages=messages,
            parent_run_id=self.inp.run_id,
            parent_agent_id=self.inp.agent_id,
            tool_name=call.name,
            tool_call_id=call.id,
            predecessor_run_id=predecessor,
            answer=answer,
        )
        out = await self.ctx.child(child_id, child, RunOutput)
        if out.status is RunStatus.SUSPENDED and out.awaiting is not None:
            return ChildWait(
                call=call, run_id=out.run_id, agent_id=out.agent_id, awaiting=out.awaiting
            )
        if out.status is RunStatus.COMPLETED:
            return ToolOutcome(tool_call_id=call.id, tool_name=call.name, content=out.text)
        if out.status is RunStatus.FAILED:
            why = out.failure.message if out.failure else "no reason given"
            return _interrupted(call, f"agent {call.name} failed: {why}")
        if out.status is RunStatus.CANCELED:
            return _interrupted(call, f"agent {call.name} was canceled: {out.cancellation_reason}")
        return _interrupted(call, f"agent {call.name} suspended without saying why")

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
            tuple(self.recorded.get(c.id) or _interrupted(c, text) for c in calls),
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
        return self._suspended(awaiting)

    async def _suspend_for_children(self, waiting: _ChildrenWait) -> RunOutput:
        """Suspend because child runs wait; the first child's question is the run's."""
        self._check_cancel()
        checkpoint = RunCheckpoint(
            version=CHECKPOINT_VERSION,
            agent_id=self.inp.agent_id,
            turn=self.turn,
            children=waiting.children,
            calls=waiting.calls,
            results=waiting.results,
            text=waiting.text,
        )
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
        return self._output(RunStatus.SUSPENDED, awaiting=waiting.children[0].awaiting)

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
        await self._close_pending(_NOT_RUN)
        await self._complete(RunStatus.FAILED, failure)
        return self._output(RunStatus.FAILED, failure=failure)


def plan_records(turn: int, plan: PlanResult) -> list[RecordSpec]:
    """What plan ``plan`` of turn ``turn`` records, in order (the planner turn writes these).

    Notes and model usage; then the final message, or the assistant message,
    the ``executing_tools`` phase and one ``tool_call_scheduled`` per call, or
    (an await) the assistant message of the question.
    """
    step = f"turn:{turn}"
    specs = [RecordSpec.note(turn, i, n.text, n.labels) for i, n in enumerate(plan.notes)]
    specs += [
        RecordSpec.usage(turn, i, UsagePayload(**msgspec.structs.asdict(u)))
        for i, u in enumerate(plan.usage)
    ]
    if plan.final is not None:
        return [*specs, RecordSpec.appended(f"{step}:final", plan.final)]
    if plan.await_ is not None:
        message = plan.message or _await_message(plan.await_)
        return [*specs, RecordSpec.appended(f"{step}:assistant", message)]
    message = plan.message or Message(
        role="assistant", parts=tuple(c.part() for c in plan.tool_calls)
    )
    return [
        *specs,
        RecordSpec.appended(f"{step}:assistant", message),
        RecordSpec.phase(Phase.EXECUTING_TOOLS, turn),
        *(RecordSpec.scheduled(step, c.id, c.name, c.input) for c in plan.tool_calls),
    ]
