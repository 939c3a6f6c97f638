"""The input of a planner turn, as the run loop builds it: one place for the loop and for an
engine that runs the turn after a lone tool call in that call's own activity.

The loop (:mod:`agentledger.runtime.workflow`) builds every planner turn's
input with :func:`planner_input`. After a lone tool call of a planner turn's
step whose activity recorded, with its result, the step's results message and
the next turn's phase (``ToolCallOutput.settled``), the loop has nothing to
write and nothing to decide before that turn: :func:`turn_after_call` is the
input it then gives it. An engine may run that turn right after the call, in
the same activity, and hand the loop its result (the Temporal engine does, see
:mod:`agentledger.engine.temporal.fused`); it checks that the loop asked for
exactly this input.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agentledger.runtime.planner import Answer, RenderedPrompt, ToolOutcome
from agentledger.runtime.records import RecordSpec
from agentledger.runtime.wire import PlanTurnInput, ToolCallInput, ToolCallOutput
from agentledger.storage.types import RunStart

__all__ = ["planner_input", "turn_after_call"]


def planner_input(
    *,
    run: RunStart,
    turn_id: str,
    turn: int,
    resume: bool,
    at: datetime,
    records: Sequence[RecordSpec],
    prompt: RenderedPrompt | None,
    results: tuple[ToolOutcome, ...],
    answer: Answer | None,
    max_turn_attempts: int,
) -> PlanTurnInput:
    """Planner turn ``turn`` of run ``run``: the records it writes first (``records``,
    decided at ``at``), what it resumes with, and its crash-loop limit.

    A final plan ends the run at once (``complete``): nothing is owed after it.
    """
    return PlanTurnInput(
        run=run,
        turn_id=turn_id,
        turn=turn,
        resume=resume,
        at=at,
        records=tuple(records),
        prompt=prompt,
        tool_results=results,
        answer=answer,
        max_turn_attempts=max_turn_attempts,
        complete=True,
    )


def turn_after_call(
    call: ToolCallInput, out: ToolCallOutput, prompt: RenderedPrompt | None
) -> PlanTurnInput | None:
    """The planner turn the loop runs right after lone call ``call`` came back ``out``, with
    nothing written or decided between them; None when the loop does anything else first.

    That is when the call's activity recorded the step's results message and
    turn ``call.then_turn``'s phase with its result (``out.settled``), the
    call is not in doubt and the session goes on. (A cancel requested
    meanwhile is the engine's to see: the loop stops before the turn.)
    ``prompt`` is the run's rendered prompt, as its planner turns carry it.
    """
    if (
        not call.then_turn
        or call.at is None
        or not out.settled
        or out.session_ended
        or out.in_doubt is not None
    ):
        return None
    return planner_input(
        run=call.run,
        turn_id=call.turn_id,
        turn=call.then_turn,
        resume=True,
        at=call.at,
        records=(),
        prompt=prompt,
        results=(out.outcome,),
        answer=None,
        max_turn_attempts=call.max_turn_attempts,
    )
