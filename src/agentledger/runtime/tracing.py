"""The run loop's spans: a run, its planner turns, agents used as tools and tool calls.

The runtime opens them through :mod:`agentledger.observability.tracing`'s span
helpers (the span tree is described there); they live here because they follow
the run loop's activities by name. While tracing is off each entry point is a
shared no-op or hands back what it was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from agentledger.engine.base import WorkflowCanceled, WorkflowContext
from agentledger.observability.tracing import (
    carried_context,
    record_error,
    span,
    span_carrier,
    tracer,
    workflow_tracer,
)
from agentledger.runtime.wire import COMPLETE_RUN, PLAN_TURN, SUSPEND_RUN

try:
    from opentelemetry import trace as _otel
except ImportError:  # pragma: no cover - exercised in a subprocess without the package
    _otel = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from datetime import datetime

    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

    from agentledger.runtime.planner import ToolOutcome
    from agentledger.runtime.tools import ToolContext
    from agentledger.runtime.wire import (
        PlanTurnInput,
        PlanTurnOutput,
        RunInput,
        RunOutput,
        ToolCallInput,
    )

__all__ = [
    "CarriesTurns",
    "RunSpan",
    "TracedContext",
    "TurnSpan",
    "run_span",
    "traced_tool_call",
]

S = TypeVar("S")
T = TypeVar("T")


# --------------------------------------------------------------------------- turns


def _turn_attributes(arg: PlanTurnInput) -> dict[str, AttributeValue]:
    """The attributes of planner turn ``arg``'s span, wherever it is opened."""
    return {
        "agentledger.run.id": arg.run.run_id,
        "agentledger.agent.id": arg.run.agent_id,
        "agentledger.turn.number": arg.turn,
        "agentledger.turn.resume": arg.resume,
    }


def _mark_planned(turn: Span, out: PlanTurnOutput) -> None:
    """What the planner decided, or why it failed."""
    failure = out.failure
    if failure is not None:
        turn.set_attribute("error.type", failure.code or failure.kind)
        turn.set_attribute("agentledger.turn.failure_kind", failure.kind)
        turn.set_status(_otel.Status(_otel.StatusCode.ERROR, failure.message))
    elif out.result is not None:
        plan = out.result
        decided = (
            "final"
            if plan.final is not None
            else "await"
            if plan.await_ is not None
            else "tool_calls"
        )
        turn.set_attribute("agentledger.turn.plan", decided)


def _mark_failed(turn: Span, error: BaseException) -> None:
    """The planner turn failed for good with ``error`` (or was interrupted)."""
    if isinstance(error, WorkflowCanceled | asyncio.CancelledError):
        turn.set_attribute("agentledger.interrupted", True)
    else:
        record_error(turn, error)


class TurnSpan:
    """The ``agentledger.turn`` span of a planner turn an activity runs ahead of the run loop
    (the Temporal engine runs the turn after a lone tool call in that call's activity).

    It opens under the run's span, given as a carrier (:func:`~agentledger.observability.
    tracing.span_carrier`), times the turn, and hands back its own carrier: the workflow
    makes it the parent of what the plan causes (:class:`CarriesTurns`). A no-op while
    tracing is off or without a run carrier (the run's workflow traces nothing).
    """

    __slots__ = ("_span",)

    def __init__(self, arg: PlanTurnInput, run: Mapping[str, str]) -> None:
        found = tracer() if run else None
        self._span: Span | None = None
        if found is not None:
            self._span = found.start_span(
                "agentledger.turn",
                context=carried_context(dict(run)),
                attributes=_turn_attributes(arg),
            )

    @property
    def carrier(self) -> dict[str, str]:
        """The span's context as a W3C carrier ({} while off)."""
        return {} if self._span is None else span_carrier(self._span)

    def within(self) -> contextlib.AbstractContextManager[Any]:
        """The span as the current one for the block (the planner's model calls nest in it)."""
        if self._span is None:
            return contextlib.nullcontext()
        return _otel.use_span(
            self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    def planned(self, out: PlanTurnOutput) -> None:
        """What the planner decided, or why it failed."""
        if self._span is not None:
            _mark_planned(self._span, out)

    def failed(self, error: BaseException) -> None:
        """The turn failed for good with ``error`` (or was interrupted)."""
        if self._span is not None:
            _mark_failed(self._span, error)

    def end(self) -> None:
        if self._span is not None:
            self._span.end()


@runtime_checkable
class CarriesTurns(Protocol):
    """A :class:`~agentledger.engine.WorkflowContext` whose activities may run the loop's next
    planner turn ahead of it, each in a :class:`TurnSpan` (the Temporal engine's)."""

    def trace_turns_under(self, carrier: dict[str, str]) -> None:
        """The run span's carrier: the turns run ahead open their spans under it."""

    def carried_turn(self, arg: PlanTurnInput) -> dict[str, str] | None:
        """The carrier of the span an activity opened for planner turn ``arg``, when the
        engine answers ``arg`` from that activity (None: the turn runs as usual)."""


# ---------------------------------------------------------------------------- runs


class RunSpan:
    """The ``agentledger.run`` span of one run and its planner turns; a no-op while off.

    A turn span starts with the planner's activity and stays the parent of
    what that plan causes (model calls, tool calls, child runs, store writes)
    until the next planner turn or the run's ending.
    """

    __slots__ = ("_cm", "_span", "_tracer", "_turn")

    def __init__(
        self, found: Tracer | None = None, cm: contextlib.AbstractContextManager[Span] | None = None
    ) -> None:
        self._tracer = found
        self._cm = cm
        self._span: Span | None = None
        self._turn: Span | None = None

    def __enter__(self) -> RunSpan:
        if self._cm is not None:
            self._span = self._cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        if self._cm is None:
            return None
        self.end_turn(exc[1])
        return self._cm.__exit__(*exc)

    def traced(self, ctx: WorkflowContext) -> WorkflowContext:
        """``ctx``, with planner turns and agent-tool calls traced (itself while off)."""
        if self._span is None:
            return ctx
        return TracedContext(ctx, self)

    def ended(self, out: RunOutput) -> None:
        """Say how the run ended: its status, cancellation reason, failure or what it waits
        for."""
        target = self._span
        if target is None:
            return
        target.set_attribute("agentledger.run.status", out.status.value)
        if out.cancellation_reason:
            target.set_attribute("agentledger.run.cancellation_reason", out.cancellation_reason)
        if out.awaiting is not None:  # suspended: what it waits for (e.g. crash_loop)
            target.set_attribute("agentledger.run.awaiting", out.awaiting.kind)
        if out.failure is not None:
            kind = out.failure.code or out.failure.kind
            target.set_attribute("error.type", kind)
            target.set_attribute("agentledger.run.failure_kind", out.failure.kind)
            target.set_status(_otel.Status(_otel.StatusCode.ERROR, out.failure.message))

    # ------------------------------------------------------------------ turns

    def begin_turn(self, arg: PlanTurnInput) -> None:
        """End the open turn, if any, and start turn ``arg.turn`` under the run."""
        self.end_turn(None)
        assert self._tracer is not None
        assert self._span is not None
        self._turn = self._tracer.start_span(
            "agentledger.turn",
            context=_otel.set_span_in_context(self._span),
            attributes=_turn_attributes(arg),
        )

    def adopt_turn(self, carrier: dict[str, str]) -> None:
        """End the open turn, if any: the next is the :class:`TurnSpan` an activity opened
        (``carrier``), the parent of what its plan causes (this run does not end it)."""
        self.end_turn(None)
        self._turn = _otel.get_current_span(carried_context(carrier))  # a non-recording one

    def carrier(self) -> dict[str, str]:
        """The run span's context as a W3C carrier ({} while off)."""
        return {} if self._span is None else span_carrier(self._span)

    def turn_planned(self, out: PlanTurnOutput) -> None:
        """What the planner decided, or why it failed."""
        if self._turn is not None:
            _mark_planned(self._turn, out)

    def turn_failed(self, error: BaseException) -> None:
        """The planner's activity failed for good (or was interrupted)."""
        if self._turn is not None:
            _mark_failed(self._turn, error)

    def end_turn(self, error: BaseException | None) -> None:
        """End the open turn; an eviction's error is recorded so replay-safe spans skip it."""
        turn, self._turn = self._turn, None
        if turn is None:
            return
        if isinstance(error, asyncio.CancelledError | GeneratorExit):
            turn.record_exception(error)
        turn.end()

    def within(self) -> contextlib.AbstractContextManager[Any]:
        """The open turn as the current span for the block (nothing when no turn is open)."""
        if self._turn is None:
            return contextlib.nullcontext()
        return _otel.use_span(
            self._turn, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )


_RUN_OFF = RunSpan()


def run_span(inp: RunInput) -> RunSpan:
    """The span of the run ``inp`` starts (``with run_span(inp) as s: ... s.ended(out)``)."""
    found = workflow_tracer()
    if found is None:
        return _RUN_OFF
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": inp.agent_id,
        "agentledger.run.id": inp.run_id,
        "agentledger.agent.id": inp.agent_id,
        "agentledger.session.id": inp.session_id,
        "agentledger.turn.id": inp.turn_id,
        "agentledger.run.mode": inp.mode,
    }
    if inp.session_id:
        attributes["gen_ai.conversation.id"] = inp.session_id
    if inp.parent_run_id:
        attributes["agentledger.parent_run.id"] = inp.parent_run_id
    if inp.predecessor_run_id:
        attributes["agentledger.predecessor_run.id"] = inp.predecessor_run_id
    return RunSpan(found, span(found, "agentledger.run", attributes))


class TracedContext:
    """A run's :class:`~agentledger.engine.WorkflowContext` that opens its turn and tool spans.

    Every activity and child workflow starts inside the open turn, so the
    engine carries that span to them (in this task, or in Temporal headers).
    A child workflow is an agent used as a tool: it gets an ``execute_tool``
    span, and its own run span nests under it.
    """

    def __init__(self, inner: WorkflowContext, run: RunSpan) -> None:
        self._inner = inner
        self._run = run
        self._ahead = inner if isinstance(inner, CarriesTurns) else None
        if self._ahead is not None:
            self._ahead.trace_turns_under(run.carrier())

    @property
    def workflow_id(self) -> str:
        return self._inner.workflow_id

    def now(self) -> datetime:
        return self._inner.now()

    def cancel_requested(self) -> bool:
        return self._inner.cancel_requested()

    @property
    def waits_for_fixes(self) -> bool:
        return self._inner.waits_for_fixes

    async def activity(
        self, name: str, arg: Any, result_type: type[T], *, interruptible: bool = False
    ) -> T:
        run = self._run
        if name == PLAN_TURN:
            # A turn the engine answers from an activity that ran it ahead has its span there.
            carried = None if self._ahead is None else self._ahead.carried_turn(arg)
            if carried:
                run.adopt_turn(carried)
            else:
                run.begin_turn(arg)
        elif name in (COMPLETE_RUN, SUSPEND_RUN):
            run.end_turn(None)
        try:
            with run.within():
                result = await self._inner.activity(
                    name, arg, result_type, interruptible=interruptible
                )
        except BaseException as e:
            if name == PLAN_TURN:
                run.turn_failed(e)
            raise
        if name == PLAN_TURN:
            run.turn_planned(result)  # type: ignore[arg-type]
        return result

    async def child(self, workflow_id: str, arg: Any, result_type: type[T]) -> T:
        inp: RunInput = arg
        found = tracer()
        assert found is not None
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": inp.tool_name,
            "gen_ai.tool.call.id": inp.tool_call_id,
            "gen_ai.tool.type": "agent",
            "agentledger.run.id": inp.parent_run_id,
            "agentledger.child_run.id": workflow_id,
        }
        with (
            self._run.within(),
            span(found, f"execute_tool {inp.tool_name}", attributes) as opened,
        ):
            out = await self._inner.child(workflow_id, arg, result_type)
            status = getattr(out, "status", None)
            if status is not None:
                opened.set_attribute("agentledger.tool.child_status", str(status.value))
                failed = status.value in {"failed", "canceled"}
                opened.set_attribute("agentledger.tool.is_error", failed)
                if failed:
                    opened.set_attribute("error.type", "tool_error")
                    opened.set_status(
                        _otel.Status(_otel.StatusCode.ERROR, "the agent did not answer")
                    )
            return out


# --------------------------------------------------------------------------- tools


def traced_tool_call(
    fn: Callable[[S, ToolCallInput, ToolContext], Awaitable[ToolOutcome]],
) -> Callable[[S, ToolCallInput, ToolContext], Awaitable[ToolOutcome]]:
    """The tool-call activity with one ``execute_tool`` span per attempt; the span names the
    call's idempotency key, attempt and effect class."""

    @functools.wraps(fn)
    def traced(self: S, arg: ToolCallInput, context: ToolContext) -> Awaitable[ToolOutcome]:
        found = tracer()
        if found is None:
            return fn(self, arg, context)  # the activity's own coroutine: nothing in between
        return attempt(found, self, arg, context)

    async def attempt(
        found: Tracer, self: S, arg: ToolCallInput, context: ToolContext
    ) -> ToolOutcome:
        call = arg.call
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "agentledger.run.id": arg.run.run_id,
            "agentledger.tool.idempotency_key": context.idempotency_key,
            "agentledger.tool.attempt": context.attempt,
            "agentledger.tool.effect": arg.effect,
        }
        with span(found, f"execute_tool {call.name}", attributes) as opened:
            outcome = await fn(self, arg, context)
            opened.set_attribute("agentledger.tool.is_error", outcome.is_error)
            if outcome.is_error:
                opened.set_attribute("error.type", "tool_error")
                opened.set_status(
                    _otel.Status(_otel.StatusCode.ERROR, "the tool returned an error")
                )
            return outcome

    return traced
