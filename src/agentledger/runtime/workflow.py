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
    run_phase_changed  planning          begin_run: turn 1 of a new run (else plan_turn;
                                         synthesizing on later turns)
    planner_note / model_usage           plan_turn: what the planner reported
    transcript_messages_appended         plan_turn: the assistant message
    run_phase_changed  executing_tools   plan_turn
    tool_call_scheduled ...              plan_turn: one per call (child runs link here [L2])
    tool_call_started ...                plan_turn: one per ``once`` call, before it runs
    tool_result_received ...             one per call, in call order (tool_call, for a lone call)
    transcript_messages_appended         the next activity: the user message holding every result
                                         (a lone call's tool_call, with the next turn's phase)
    ...                                  more turns
    run_completed                        complete_run [L7] (in process: a final plan's plan_turn)
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
Its first write rides with the write before it when that one can carry it:
the start records turn 1's phase, and a lone tool call of a planner turn's
step records, with its result, the step's results message and the next
turn's phase, taking the steering messages waiting for the run as the turn
would (each activity says whether it did: an older worker does not). A
one-tool run so commits five transactions: start, plan, tool, plan, end. In
process, a final plan is recorded with the run's completion (the planner
turn asked to, and says it did): four (a Temporal worker looks for the
session's next turn in ``complete_run``, so there it stays its own write).

A model call is recorded by the planner turn that makes it, and a lone tool
call by its activity, before the activity completes: a retry after a lost
completion finds the record instead of doing the work again. The results of
parallel calls are written together, in call order, after the last one; each
call's activity saves its result privately in the store first, so a retry
after a lost completion does not run its tool again either.

A ``once`` tool call whose activity runs again without a recorded or saved
result (its first attempt may have acted) is *in doubt*: the activity does
not call the tool, and the run suspends like a waiting child, asking the
host about one such call at a time; the continuation records the decision
(``tool_call_answered``) and the call's result, or runs it again with the
same idempotency key (a new ``tool_call_started`` first).

A child run that suspends (an agent used as a tool waits for outside input)
suspends its parent once the step's other calls are in: the parent keeps
their results as records, and its checkpoint names the waiting children.
The parent's continuation answers the first child by continuing it [K1]
(under the continuation, as the child's new parent), then finishes the
step with one user message holding every result, and plans on. A child
that asks again suspends the parent's continuation again.

A planner turn or tool call started ``max_turn_attempts`` times without
finishing (its worker kept dying: killed, out of memory, timed out) fails
with :data:`~agentledger.engine.CRASH_LOOP`, and the run *pauses*: it
suspends with a ``crash_loop`` checkpoint naming the activity and the
attempts, keeping the tool step's state the way a waiting child does (the
step's other results are recorded). The host decides: ``resume`` with an
empty ``Answer()`` starts the continuation, which runs the unfinished work
again (the planner turn, or the calls still without a result; a call the
answer gives a result in ``tool_results`` takes that result instead);
``resume`` with ``Answer(approved=False)`` ends it: the calls get an error
result and the continuation fails with kind ``crash_loop``.

Cancellation [C1]/[C3] reaches the loop at interruptible awaits and at the
safe points between steps. Tool calls in flight are interrupted and get an
error result, so every tool_use in the transcript has its tool_result; the
terminal record then repeats the recorded reason.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any, Literal

from agentledger.engine.base import (
    CRASH_LOOP,
    ActivityFailedError,
    ChildFailedError,
    WorkflowCanceled,
    WorkflowContext,
)
from agentledger.errors import RunLoopError
from agentledger.runtime import tracing
from agentledger.runtime.checkpoint import (
    ChildWait,
    CrashLoop,
    InDoubtToolCall,
    RunCheckpoint,
)
from agentledger.runtime.loop_state import LoopState
from agentledger.runtime.planner import (
    Answer,
    AwaitClarification,
    ToolCall,
    ToolFailed,
    ToolHappened,
    ToolOutcome,
)
from agentledger.runtime.planner_input import planner_input
from agentledger.runtime.records import Phase, RecordSpec, ToolAnsweredPayload, turn_step
from agentledger.runtime.steps import (
    INTERRUPTED,
    CrashLooped,
    Fail,
    Looped,
    Outcome,
    StepWaits,
    Waiting,
    activity_failure,
    calls_of,
    crash_loop_failure,
    interrupted,
    plan_records,
)
from agentledger.runtime.wire import (
    BEGIN_RUN,
    PLAN_TURN,
    TOOL_CALL,
    BeginRunInput,
    BeginRunOutput,
    PlanTurnOutput,
    RunInput,
    RunOutput,
    ToolCallInput,
    ToolCallOutput,
)
from agentledger.storage.payloads import SESSION_ENDED, Failure
from agentledger.storage.types import RunStatus, StartOutcome
from agentledger.transcript import Message, TextPart

__all__ = ["INTERRUPTED", "plan_records", "run_workflow"]


async def run_workflow(ctx: WorkflowContext, inp: RunInput) -> RunOutput:
    """Run one run to its end and say how it ended.

    Raises:
        ActivityFailedError: the start itself failed (nothing was written), or the
            run's final record could not be written (``ensure_run_completion``
            closes such a run later [E2]).
    """
    with tracing.run_span(inp) as span:  # turns and agent tools: span.traced(ctx)
        out = await _Loop(span.traced(ctx), inp).run()
        span.ended(out)
    return out


class _Loop(LoopState):
    """One run's workflow: begin, plan, execute tool calls, answer what it waited for."""

    # --------------------------------------------------------------------- run

    async def run(self) -> RunOutput:
        try:
            begin = await self._begin()
        except ActivityFailedError as e:
            if not e.retryable:
                raise  # the start was refused: nothing was written
            try:  # the attempts ran out, maybe after the start: end the run if it is there
                return await self._end_failed(activity_failure("activity_failed", e))
            except ActivityFailedError:
                raise e from None
        if begin.outcome is StartOutcome.STOP:  # [C2]: no planner or tool work at all
            return self._output(RunStatus.CANCELED, cancellation_reason=SESSION_ENDED)
        try:
            if begin.failure is not None or begin.agent is None:
                raise Fail(begin.failure or Failure(message="no agent", kind="activity_failed"))
            self.session_ended = begin.session_ended
            return await self._drive(begin)
        except WorkflowCanceled:
            return await self._end_canceled()
        except Fail as failed:
            return await self._end_failed(failed.failure)
        except ActivityFailedError as e:
            return await self._end_failed(activity_failure("activity_failed", e))
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
        at = self.ctx.now()
        begin = await self.ctx.activity(
            BEGIN_RUN,
            BeginRunInput(
                run=self.run_start,
                turn_id=self.inp.turn_id,
                mode=self.inp.mode,
                at=at,
                parent_agent_id=self.inp.parent_agent_id,
                tool_name=self.inp.tool_name,
                tool_call_id=self.inp.tool_call_id,
                history=() if continuation else self.inp.messages[:-1],
                history_from=None if continuation else self.inp.history_from,
                copied_from=None if continuation else self.inp.copied_from,
                message=None if continuation else self.inp.messages[-1],
                claim=self.inp.claim,
                planning=not continuation,
            ),
            BeginRunOutput,
        )
        if begin.planning:  # turn 1's phase is in: that turn writes nothing before planning
            self.phase_written = (1, at)
        return begin

    async def _drive(self, begin: BeginRunOutput) -> RunOutput:
        try:
            return await self._prepare_and_plan(begin)
        except StepWaits as waiting:
            return await self._suspend_for_children(waiting)
        except CrashLooped as looped:
            return await self._pause(looped)

    async def _prepare_and_plan(self, begin: BeginRunOutput) -> RunOutput:
        assert begin.agent is not None
        self.agent = begin.agent
        self.prompt = begin.prompt
        if begin.checkpoint is None:
            _ = self.inp.messages[-1]  # begin_run recorded it (no message: a bug, IndexError)
            return await self._plan_loop(resume=False, results=(), answer=None)
        answer = self.inp.answer or Answer()
        looped = begin.checkpoint.crash_loop
        if looped is not None and not looped.calls:  # a planner turn: plan it again
            if answer.approved is False:
                raise Fail(crash_loop_failure(looped))
            self._owe([RecordSpec.phase(Phase.PROMPTED)])
            results = begin.checkpoint.results
            return await self._plan_loop(resume=looped.resume, results=results, answer=None)
        results = await self._take_answer(begin.checkpoint, answer)
        # a child's answer went to the child, a decision to its call, a crash loop's answer
        # to the calls run again: the planner sees the step's results
        mine = None if begin.checkpoint.kind in ("child", "in_doubt", "crash_loop") else answer
        return await self._plan_loop(resume=True, results=results, answer=mine)

    async def _take_answer(
        self, checkpoint: RunCheckpoint, answer: Answer
    ) -> tuple[ToolOutcome, ...]:
        """Put the outside input into the transcript: text, tool results, or run the calls."""
        if checkpoint.crash_loop is not None:
            return await self._rerun(checkpoint, checkpoint.crash_loop, answer)
        if checkpoint.kind == "child":
            return await self._answer_child(checkpoint, answer)
        if checkpoint.kind == "in_doubt":
            return await self._answer_in_doubt(checkpoint, answer)
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
            outcomes = tuple(interrupted(c, why) for c in calls)
            await self._record_results("resume", calls, outcomes)
            return outcomes
        outcomes = tuple(
            ToolOutcome(tool_call_id=c.id, tool_name=c.name, content=answer.tool_results[c.id])
            if c.id in answer.tool_results
            else interrupted(c, "no result was provided for this call")
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
        self.origin = checkpoint.origin_run_id or self.inp.predecessor_run_id
        self._owe([RecordSpec.phase(Phase.PROMPTED)])
        first, *rest = checkpoint.children
        try:
            outcome = await self._child(
                first.call, first.agent_id, predecessor=first.run_id, answer=answer
            )
        except WorkflowCanceled:
            outcome = None
        except ChildFailedError as e:
            outcome = interrupted(first.call, f"agent {first.call.name} failed: {e.reason}")
        waiting: dict[str, Waiting] = {w.call.id: w for w in rest}
        waiting.update((d.tool_call_id, d) for d in checkpoint.in_doubt)
        by_id: dict[str, Outcome] = {
            **self.recorded,
            **waiting,
            first.call.id: outcome,
        }
        outcomes = tuple(by_id[c.id] for c in calls)
        return await self._settle("resume", calls, outcomes, checkpoint.text)

    async def _rerun(
        self, checkpoint: RunCheckpoint, looped: CrashLoop, answer: Answer
    ) -> tuple[ToolOutcome, ...]:
        """Run the calls of a paused step still without a result again, then finish the step.

        A call ``answer.tool_results`` gives a result takes it instead; with
        ``answer.approved`` False the run ends failed (kind ``crash_loop``),
        every call still without a result getting an error result (not run).
        Children of the step that wait for outside input, and calls in doubt,
        still wait. A call run again keeps its idempotency key (of the run that
        scheduled it), its attempts counting on from the lost ones.
        """
        calls = checkpoint.calls
        self.pending, self.pending_step = calls, "resume"
        self.recorded = {o.tool_call_id: o for o in checkpoint.results}
        self.origin = checkpoint.origin_run_id or self.inp.predecessor_run_id
        self._owe([RecordSpec.phase(Phase.PROMPTED)])
        if answer.approved is False:  # ended: the calls without a result get an error result
            raise Fail(crash_loop_failure(looped))
        by_id: dict[str, Outcome] = dict(self.recorded)
        by_id.update((w.call.id, w) for w in checkpoint.children)
        by_id.update((d.tool_call_id, d) for d in checkpoint.in_doubt)
        by_id.update(
            (
                c.id,
                ToolOutcome(tool_call_id=c.id, tool_name=c.name, content=answer.tool_results[c.id]),
            )
            for c in calls
            if c.id in answer.tool_results and c.id not in by_id
        )
        lost = {c.id for c in looped.calls}
        again = tuple(c for c in calls if c.id not in by_id)
        for call in again:  # attempts made before: the lost ones; 1 for the others
            self.attempts[call.id] = looped.attempts if call.id in lost else 1
        ran = await self._run_calls(again, "resume", start=True) if again else ()
        by_id.update((c.id, o) for c, o in zip(again, ran, strict=True))
        return await self._settle(
            "resume", calls, tuple(by_id[c.id] for c in calls), checkpoint.text
        )

    async def _answer_in_doubt(
        self, checkpoint: RunCheckpoint, answer: Answer
    ) -> tuple[ToolOutcome, ...]:
        """Record the host's decision on the first call in doubt, then finish the step.

        ``happened`` and ``failed`` become the call's result; ``retry`` runs it again
        (same key, next attempt). The step's other calls without a result run again
        (calls still in doubt and waiting children stay waiting).
        """
        calls = checkpoint.calls
        self.pending, self.pending_step = calls, "resume"
        self.recorded = {o.tool_call_id: o for o in checkpoint.results}
        self.origin = checkpoint.origin_run_id or self.inp.predecessor_run_id
        first, *rest = checkpoint.in_doubt
        decision = answer.decision
        if decision is None:  # the client refuses this; a run started around it fails
            raise Fail(
                Failure(
                    message="a tool call in doubt is answered with ToolHappened, ToolRetry "
                    "or ToolFailed",
                    kind="invalid_answer",
                )
            )
        by_id: dict[str, Outcome] = dict(self.recorded)
        by_id.update((w.call.id, w) for w in checkpoint.children)
        by_id.update((d.tool_call_id, d) for d in rest)
        content: Any = None
        if isinstance(decision, ToolHappened):
            kind: Literal["happened", "retry", "failed"] = "happened"
            content = decision.result
            outcome = ToolOutcome(
                tool_call_id=first.tool_call_id, tool_name=first.tool_name, content=content
            )
            by_id[first.tool_call_id] = outcome
        elif isinstance(decision, ToolFailed):
            kind = "failed"
            by_id[first.tool_call_id] = ToolOutcome(
                tool_call_id=first.tool_call_id,
                tool_name=first.tool_name,
                content=f"failed (decided by {decision.by or 'the host'}): {decision.reason}",
                is_error=True,
            )
        else:
            kind = "retry"
        record = ToolAnsweredPayload(
            tool_call_id=first.tool_call_id,
            tool_name=first.tool_name,
            key=first.key,
            decision=kind,
            by=decision.by,
            result=content,
            reason=decision.reason if isinstance(decision, ToolFailed) else "",
        )
        self._owe([RecordSpec.phase(Phase.PROMPTED), RecordSpec.answered("resume", record)])
        again = tuple(c for c in calls if c.id not in by_id)
        for call in again:  # attempts made before: the doubted one's; 1 for the others
            self.attempts[call.id] = first.attempt if call.id == first.tool_call_id else 1
        ran = await self._run_calls(again, "resume", start=True) if again else ()
        by_id.update((c.id, o) for c, o in zip(again, ran, strict=True))
        outcomes = tuple(by_id[c.id] for c in calls)
        return await self._settle("resume", calls, outcomes, checkpoint.text)

    async def _plan_loop(
        self, *, resume: bool, results: tuple[ToolOutcome, ...], answer: Answer | None
    ) -> RunOutput:
        while True:
            self._check_cancel()
            self.turn += 1
            if self.turn > self.agent.max_turns:
                raise Fail(
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
            step = turn_step(self.turn)
            if out.recorded:  # its tool uses (if any) are in the log
                self.pending, self.pending_step = plan.tool_calls or calls_of(plan.await_), step
                self.origin, self.attempts = "", {}
                assert self.turn_at is not None
                self.started_at = {
                    c.id: self.turn_at for c in plan.tool_calls if self._effect(c) == "once"
                }
            if out.completed and plan.final is not None:  # recorded with its completion
                self._paid()
                return self._output(RunStatus.COMPLETED, final=plan.final)
            self._check_cancel()  # a safe point
            if plan.final is not None:
                return await self._end_completed(plan.final)
            if plan.await_ is not None:
                if not out.recorded:  # a planner turn of an earlier version left it to us
                    self._owe(plan_records(self.turn, plan, self.agent.effects, self.inp.run_id))
                if not isinstance(plan.await_, AwaitClarification):
                    self.pending, self.pending_step = plan.await_.calls, step
                return await self._suspend(plan.await_)
            then = self.agent.turn_after(self.turn)
            results = await self._execute(plan.tool_calls, step, scheduled=True, then_turn=then)
            resume, answer = True, None

    async def _plan(
        self, resume: bool, results: tuple[ToolOutcome, ...], answer: Answer | None, phase: Phase
    ) -> PlanTurnOutput:
        """One planner turn: the owed records and the phase, then the plan, recorded.

        A plan that waits for outside input comes back ``suspended``: the
        turn recorded it and suspended the run.
        """
        written, self.phase_written = self.phase_written, None
        if written is None or written[0] != self.turn:
            self._owe([RecordSpec.phase(phase, self.turn)])
        # else an earlier activity recorded this turn's phase (the start, the last tool call)
        self.turn_at = self.owed_at or (written[1] if written else None)
        assert self.turn_at is not None
        arg = planner_input(  # the one way to build it (an engine builds the turn after a call)
            run=self.run_start,
            turn_id=self.inp.turn_id,
            turn=self.turn,
            resume=resume,
            at=self.turn_at,
            records=self.owed,
            prompt=self.prompt,
            results=results,
            answer=answer,
            max_turn_attempts=self.agent.max_turn_attempts,
        )
        try:
            out = await self.ctx.activity(PLAN_TURN, arg, PlanTurnOutput, interruptible=True)
        except ActivityFailedError as e:
            if e.error_type == CRASH_LOOP:  # the turn kept dying: pause, its owed records too
                looped = CrashLoop(activity=e.activity, attempts=e.attempts, resume=resume)
                raise CrashLooped(looped, results=results) from e
            raise Fail(activity_failure("planner_error", e)) from e
        self._paid()
        if out.session_ended:
            self.session_ended = True
            self._check_cancel()
        if out.failure is not None:
            raise Fail(out.failure)
        if out.result is None:
            raise Fail(Failure(message="the planner returned nothing", kind="invalid_plan"))
        return out

    # ------------------------------------------------------------------- tools

    async def _execute(
        self,
        calls: tuple[ToolCall, ...],
        step: str,
        text: str = "",
        *,
        scheduled: bool = False,
        then_turn: int = 0,
    ) -> tuple[ToolOutcome, ...]:
        """Run the calls concurrently; record every result (interrupted ones too).

        Unless the planner turn ``scheduled`` them, the calls are recorded first.
        With ``then_turn`` (planner turn ``then_turn`` follows), a lone call's
        activity records the step's results message and that turn's phase with
        its result, in its transaction, when it can.
        """
        if not scheduled:
            self.origin, self.attempts = "", {}
            self._owe(
                [
                    RecordSpec.phase(Phase.EXECUTING_TOOLS, self.turn),
                    *(
                        RecordSpec.scheduled(step, c.id, c.name, c.input, self._effect(c))
                        for c in calls
                    ),
                ]
            )
        outcomes = await self._run_calls(calls, step, start=not scheduled, then_turn=then_turn)
        return await self._settle(step, calls, outcomes, text)

    async def _run_calls(
        self, calls: tuple[ToolCall, ...], step: str, *, start: bool, then_turn: int = 0
    ) -> tuple[Outcome, ...]:
        """Run the calls concurrently, each once call after its ``tool_call_started`` record.

        With ``start``, the owed records (and those started records) are written
        first; otherwise the planner turn wrote them with its plan.
        """
        if start:
            once = [c for c in calls if self._effect(c) == "once"]
            self._owe(
                RecordSpec.started(step, c.id, c.name, self._key(c), self.attempts.get(c.id, 0) + 1)
                for c in once
            )
            if self.owed_at is not None:
                self.started_at.update((c.id, self.owed_at) for c in once)
            await self._flush()
        # A lone call records its own result; several record theirs together, in call order.
        at = self.ctx.now() if len(calls) == 1 else None
        if at is None or self.owed or self.recorded:
            then_turn = 0  # several calls, or records to write first: the turn writes them
        if len(calls) == 1:  # no task of its own: it is the step
            return (await self._call(calls[0], step, at, then_turn),)
        return tuple(await asyncio.gather(*(self._call(c, step, at, then_turn) for c in calls)))

    async def _settle(
        self,
        step: str,
        calls: tuple[ToolCall, ...],
        outcomes: tuple[Outcome, ...],
        text: str,
    ) -> tuple[ToolOutcome, ...]:
        """Record a finished step's results; or pause it; or suspend for its waiting children
        and calls in doubt.

        Raises:
            WorkflowCanceled: a call was interrupted (every call has its result).
            CrashLooped: calls kept dying (the other results are recorded, the
                results message is not; children and calls in doubt are kept).
            StepWaits: child runs wait for outside input, or once calls are in
                doubt (the other results are recorded, the results message is not).
        """
        if any(o is None for o in outcomes):
            final = tuple(
                o if isinstance(o, ToolOutcome) else interrupted(c)
                for c, o in zip(calls, outcomes, strict=True)
            )
            await self._record_results(step, calls, final, text)
            raise WorkflowCanceled()
        children = tuple(o for o in outcomes if isinstance(o, ChildWait))
        doubts = tuple(o for o in outcomes if isinstance(o, InDoubtToolCall))
        done = tuple(o for o in outcomes if isinstance(o, ToolOutcome))
        looped = tuple(o for o in outcomes if isinstance(o, Looped))
        if children or doubts or looped:
            fresh = [o for o in done if o.tool_call_id not in self.recorded]
            by_id = {c.id: c for c in calls}
            self._owe(
                RecordSpec.result(
                    step, o.tool_call_id, by_id[o.tool_call_id].name, o.content, o.is_error
                )
                for o in fresh
            )
            self.recorded.update((o.tool_call_id, o) for o in fresh)
            if looped:
                crash = CrashLoop(
                    activity=looped[0].activity,
                    attempts=max(o.attempts for o in looped),
                    calls=tuple(o.call for o in looped),
                )
                raise CrashLooped(
                    crash,
                    calls=calls,
                    results=done,
                    children=children,
                    in_doubt=doubts,
                    text=text,
                )
            raise StepWaits(calls, done, children, text, doubts)
        if self.settled:  # the lone call's activity recorded the results message
            assert len(calls) == 1
            assert not text
            self.settled, self.pending, self.recorded = False, (), {}
            return done
        await self._record_results(step, calls, done, text)
        return done

    async def _call(
        self, call: ToolCall, step: str, at: datetime | None, then_turn: int = 0
    ) -> Outcome:
        """One call's outcome (a tool records its own); a waiting child or a once call in
        doubt; a call that kept dying; None if interrupted."""
        try:
            if call.name in self.agent.agent_tools:
                return await self._child(call, self.agent.agent_tools[call.name])
            effect = self._effect(call)
            arg = ToolCallInput(
                run=self.run_start,
                turn_id=self.inp.turn_id,
                call=call,
                step=step,
                at=at,
                max_turn_attempts=self.agent.max_turn_attempts,
                effect=effect,
                key=self._key(call) if self.origin else "",
                attempts_before=self.attempts.get(call.id, 0),
                started_at=self.started_at.get(call.id) if effect == "once" else None,
                then_turn=then_turn,
            )
            out = await self.ctx.activity(TOOL_CALL, arg, ToolCallOutput, interruptible=True)
            if out.in_doubt is not None:
                self.session_ended = self.session_ended or out.session_ended
                return out.in_doubt
            if at is not None:
                self.recorded[call.id] = out.outcome
            if at is not None and then_turn and out.settled:
                self.settled, self.phase_written = True, (then_turn, at)
            self.session_ended = self.session_ended or out.session_ended
            return out.outcome
        except WorkflowCanceled:
            return None
        except ActivityFailedError as e:
            if e.error_type == CRASH_LOOP:
                return Looped(call=call, activity=e.activity, attempts=e.attempts)
            return interrupted(call, f"tool {call.name} failed: {e.reason}")
        except ChildFailedError as e:
            return interrupted(call, f"agent {call.name} failed: {e.reason}")

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
                return interrupted(
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
            return interrupted(call, f"agent {call.name} failed: {why}")
        if out.status is RunStatus.CANCELED:
            return interrupted(call, f"agent {call.name} was canceled: {out.cancellation_reason}")
        return interrupted(call, f"agent {call.name} suspended without saying why")
