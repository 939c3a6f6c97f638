"""The vocabulary of a run's steps: what the run loop signals, decides and records.

Pure values and functions the loop (:mod:`agentledger.runtime.workflow`) and the
planner-turn activity share: the exceptions that end or suspend a step, the
error results of calls that did not finish, and :func:`plan_records`, what a
plan records (written by the planner turn, so the loop and a retried activity
agree on every byte).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec

from agentledger.engine.base import (
    CRASH_LOOP,
    ActivityFailedError,
)
from agentledger.runtime.checkpoint import (
    ChildWait,
    CrashLoop,
    InDoubtToolCall,
)
from agentledger.runtime.planner import (
    Await,
    AwaitClarification,
    PlanResult,
    ToolCall,
    ToolOutcome,
)
from agentledger.runtime.records import Phase, RecordSpec, UsagePayload, turn_step
from agentledger.runtime.tools import idempotency_key
from agentledger.storage.payloads import Failure
from agentledger.transcript import Message, TextPart

__all__ = [
    "INTERRUPTED",
    "NOT_RUN",
    "CrashLooped",
    "Fail",
    "Looped",
    "Outcome",
    "StepWaits",
    "Waiting",
    "activity_failure",
    "await_message",
    "calls_of",
    "crash_loop_failure",
    "effect_of",
    "interrupted",
    "plan_records",
]

INTERRUPTED = "interrupted: the run was canceled before this tool call finished"
"""Content of the error result a tool call in flight gets when its run is canceled."""

NOT_RUN = "not run: the run failed before this tool call finished"


class Fail(Exception):
    """The run fails with ``failure`` (planner error, invalid plan, too many turns)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class StepWaits(Exception):
    """Child runs of a tool step suspended, or once calls of it are in doubt: the run
    suspends with the step's state."""

    def __init__(
        self,
        calls: tuple[ToolCall, ...],
        results: tuple[ToolOutcome, ...],
        children: tuple[ChildWait, ...],
        text: str,
        in_doubt: tuple[InDoubtToolCall, ...] = (),
    ) -> None:
        super().__init__(f"{len(children) + len(in_doubt)} call(s) wait for outside input")
        self.calls = calls
        self.results = results
        self.children = children
        self.text = text
        self.in_doubt = in_doubt


Waiting = ChildWait | InDoubtToolCall
"""A call of a tool step that waits for the host: a suspended child, or a call in doubt."""


class Looped(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call whose activity was started too often without finishing."""

    call: ToolCall
    activity: str
    attempts: int


Outcome = ToolOutcome | Waiting | Looped | None
"""A call's outcome in a step: its result, a wait, a crash loop, or None (interrupted)."""


class CrashLooped(Exception):
    """A planner turn or tool calls kept dying: the run pauses with the step's state."""

    def __init__(
        self,
        crash_loop: CrashLoop,
        *,
        calls: tuple[ToolCall, ...] = (),
        results: tuple[ToolOutcome, ...] = (),
        children: tuple[ChildWait, ...] = (),
        in_doubt: tuple[InDoubtToolCall, ...] = (),
        text: str = "",
    ) -> None:
        super().__init__(f"{crash_loop.activity} started {crash_loop.attempts} times")
        self.crash_loop = crash_loop
        self.calls = calls
        self.results = results
        self.children = children
        self.in_doubt = in_doubt
        self.text = text


def activity_failure(kind: str, error: ActivityFailedError) -> Failure:
    return Failure(
        message=error.reason, kind=kind, code=error.error_type, retryable=error.retryable
    )


def interrupted(call: ToolCall, text: str = INTERRUPTED) -> ToolOutcome:
    return ToolOutcome(tool_call_id=call.id, tool_name=call.name, content=text, is_error=True)


def calls_of(awaiting: Await | None) -> tuple[ToolCall, ...]:
    """The tool calls an await holds (a clarification holds none)."""
    if awaiting is None or isinstance(awaiting, AwaitClarification):
        return ()
    return awaiting.calls


def await_message(awaiting: Await) -> Message:
    """The assistant message of a suspension, when the planner gave none."""
    if isinstance(awaiting, AwaitClarification):
        return Message(role="assistant", parts=(TextPart(text=awaiting.question),))
    return Message(role="assistant", parts=tuple(c.part() for c in awaiting.calls))


def crash_loop_failure(looped: CrashLoop) -> Failure:
    """How a paused run the host declined to run again ends."""
    return Failure(
        message=f"{looped.activity} was started {looped.attempts} times without finishing; "
        "the host declined to run it again",
        kind="crash_loop",
        code=CRASH_LOOP,
    )


def plan_records(
    turn: int, plan: PlanResult, effects: Mapping[str, str] | None = None, run_id: str = ""
) -> list[RecordSpec]:
    """What plan ``plan`` of turn ``turn`` records, in order (the planner turn writes these).

    Notes and model usage; then the final message, or the assistant message,
    the ``executing_tools`` phase and one ``tool_call_scheduled`` per call
    (naming the tool's effect class from ``effects`` unless it is ``retry``) and
    one ``tool_call_started`` per ``once`` call (its key from ``run_id``), or (an
    await) the assistant message of the question.
    """
    effects = effects or {}
    step = turn_step(turn)
    specs = [RecordSpec.note(turn, i, n.text, n.labels) for i, n in enumerate(plan.notes)]
    specs += [
        RecordSpec.usage(turn, i, UsagePayload(**msgspec.structs.asdict(u)))
        for i, u in enumerate(plan.usage)
    ]
    if plan.final is not None:
        return [*specs, RecordSpec.appended(f"{step}:final", plan.final)]
    if plan.await_ is not None:
        message = plan.message or await_message(plan.await_)
        return [*specs, RecordSpec.appended(f"{step}:assistant", message)]
    message = plan.message or Message(
        role="assistant", parts=tuple(c.part() for c in plan.tool_calls)
    )
    return [
        *specs,
        RecordSpec.appended(f"{step}:assistant", message),
        RecordSpec.phase(Phase.EXECUTING_TOOLS, turn),
        *(
            RecordSpec.scheduled(step, c.id, c.name, c.input, effect_of(effects, c.name))
            for c in plan.tool_calls
        ),
        *(
            RecordSpec.started(step, c.id, c.name, idempotency_key(run_id, c.id), 1)
            for c in plan.tool_calls
            if effects.get(c.name) == "once"
        ),
    ]


def effect_of(effects: Mapping[str, str], name: str) -> Literal["retry", "keyed", "once"]:
    effect = effects.get(name, "retry")
    return "once" if effect == "once" else "keyed" if effect == "keyed" else "retry"
