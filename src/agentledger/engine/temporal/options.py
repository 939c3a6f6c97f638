"""What a run's workflow needs to know of its engine, and Temporal's hard limits.

:class:`EngineOptions` travels in the workflow input next to the run's
:class:`~agentledger.runtime.wire.RunInput`, so a replay of an old history
uses the options it was started with (changing them never breaks
determinism), and a child workflow inherits its parent's. Pure data: the
workflow sandbox imports this module.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from agentledger.engine.base import RetryPolicy
from agentledger.runtime.planner import RenderedPrompt
from agentledger.runtime.wire import (
    AgentPlan,
    BeginRunOutput,
    PlanTurnInput,
    PlanTurnOutput,
    ToolCallInput,
    ToolCallOutput,
)

__all__ = [
    "BLOB_SIZE_LIMIT",
    "CALL_AFTER_PLAN",
    "CALL_AND_PLAN",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "EVENTS_PER_EXTRA_CALL",
    "EVENTS_PER_PARALLEL_TURN",
    "EVENTS_PER_RUN",
    "EVENTS_PER_TOOL_TURN",
    "EVENTS_TO_START_DUE",
    "HISTORY_EVENTS_LIMIT",
    "HISTORY_EVENTS_WARNING",
    "HISTORY_SIZE_LIMIT",
    "HISTORY_SIZE_WARNING",
    "PAYLOAD_TOO_LARGE",
    "PLAN_AFTER_CALL",
    "PLAN_AND_CALL",
    "START_DUE",
    "BeganRun",
    "CallAfterPlan",
    "CallAndPlan",
    "CallAndPlanOutput",
    "EngineOptions",
    "PlanAfterCall",
    "PlanAndCall",
    "PlanAndCallOutput",
    "StartDue",
    "StartedTurns",
    "TurnAfter",
    "tool_turns_before_history_limit",
]

BLOB_SIZE_LIMIT = 2 * 1024 * 1024
"""The server refuses a payload set (an input, a result) above this (``limit.blobSize.error``)."""
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
"""Our guard: the largest encoded workflow or activity input or result we send."""
HISTORY_EVENTS_LIMIT = 51_200
"""The server ends a workflow at this many history events (``limit.historyCount.error``)."""
HISTORY_EVENTS_WARNING = 10_240
"""The server logs a warning from this many events on (``limit.historyCount.warn``)."""
HISTORY_SIZE_LIMIT = 50 * 1024 * 1024
"""The server ends a workflow at this many history bytes (``limit.historySize.error``)."""
HISTORY_SIZE_WARNING = 10 * 1024 * 1024
"""The server logs a warning from this many bytes on (``limit.historySize.warn``)."""
EVENTS_PER_RUN = 13
"""History events of a session's run that answers at once, or after one tool turn of one
call, with no message of its session waiting behind it (begin marker, one activity for the
planner turn, its lone call and the turn after it, end marker, their workflow tasks)."""
EVENTS_TO_START_DUE = 3
"""History events a session's run adds when a message of its session waits behind it, to
start that message's turn (a patch marker, its search attribute, a local activity marker)."""
EVENTS_PER_TOOL_TURN = 6
"""History events each planner turn with one tool call adds after the first (one activity
runs the call and the planner turn after it, then its workflow task; 6 more when the call
or that turn is handed back after a lost attempt or a TransientError)."""
EVENTS_PER_PARALLEL_TURN = 12
"""History events a planner turn with several tool calls adds for its first call (the planner
turn and the call, 2 activities, each with its workflow task), before the extra ones."""
EVENTS_PER_EXTRA_CALL = 6
"""At most this many more events per extra parallel tool call in a turn (3 when batched)."""
PAYLOAD_TOO_LARGE = "PayloadTooLargeError"
"""The error type of an activity whose input or result is over the guard."""


def tool_turns_before_history_limit(
    calls_per_turn: int = 1, *, limit: int = HISTORY_EVENTS_LIMIT
) -> int:
    """How many tool turns a run can take before its history reaches ``limit`` events.

    With the defaults: 8,531 one-call turns (1,705 before the warning at
    10,240), far more than ``Agent.max_turns`` allows.
    """
    room = limit - EVENTS_PER_RUN - EVENTS_TO_START_DUE
    if calls_per_turn <= 1:  # the first turn's call rides in the run's own events
        return room // EVENTS_PER_TOOL_TURN + 1
    per_turn = EVENTS_PER_PARALLEL_TURN + EVENTS_PER_EXTRA_CALL * (calls_per_turn - 1)
    return room // per_turn


class EngineOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Activity options of one run's workflow (and of its child workflows).

    Unknown fields are ignored, as in every workflow and activity message: an
    option added later, sent by a newer client, still decodes on an older worker.
    """

    retry: RetryPolicy = RetryPolicy()
    """How activities are retried: only a TransientError; ContractError never."""
    activity_timeout: float = 600.0
    """Seconds one attempt of an activity (a planner turn, a tool call) may take."""
    heartbeat_timeout: float = 30.0
    """Seconds without a heartbeat before an attempt counts as lost (its worker died).

    The worker heartbeats every running activity on its own, a third of this
    apart, so a crashed worker's activities are retried on another worker
    after about this long.
    """
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    """The largest encoded activity input or result; larger ones fail the activity for good."""

    def __post_init__(self) -> None:
        if self.activity_timeout <= 0 or self.heartbeat_timeout <= 0:
            raise ValueError("timeouts must be > 0")
        if not 0 < self.max_payload_bytes <= BLOB_SIZE_LIMIT:
            raise ValueError(f"max_payload_bytes must be in 1..{BLOB_SIZE_LIMIT}")


START_DUE = "agentledger.start_due"
"""The activity a root run's workflow runs when it has ended: start its session's due turn."""


class StartDue(msgspec.Struct, frozen=True, kw_only=True):
    """The input of :data:`START_DUE`: the session whose first waiting message may now start,
    and the options its turn's workflow is started with (those of the run that ended)."""

    session_id: str
    task_queue: str = ""
    """The queue the turn's workflow is started on: the ended run's."""
    options: EngineOptions = EngineOptions()


class StartedTurns(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :data:`START_DUE`: the run ids of the turns it started (none or one)."""

    run_ids: tuple[str, ...] = ()


PLAN_AND_CALL = "agentledger.plan_turn_and_call"
"""The activity of a planner turn that also runs the plan's lone tool call (see
:mod:`agentledger.engine.temporal.fused`): one activity, one workflow task, for both."""

CALL_AFTER_PLAN = "agentledger.tool_call_after_plan"
"""The tool call of a :data:`PLAN_AND_CALL` that started it without an outcome to carry
back: its attempts count on from the one made there."""


class BeganRun(BeginRunOutput, frozen=True, kw_only=True):
    """``begin_run``'s result as this version's worker returns it.

    ``lone_calls_in_turn`` says the run's planner turns run their lone tool
    call (:data:`PLAN_AND_CALL`). It is recorded in the run's history with
    the ``begin_run`` marker, so the run keeps the shape it started with on
    every replay and on every worker: a result recorded by an earlier
    worker lacks it (False), and its run keeps a planner turn and its tool
    call apart. (A patch marker would say the same at the cost of two
    history events and a search-attribute update per run.)
    """

    lone_calls_in_turn: bool = False
    turns_after_calls: bool = False
    """With ``lone_calls_in_turn``: the activity also runs the planner turn the loop runs
    right after the call (:class:`PlanAndCall` ``turn_after``). False from a worker
    before it: the run keeps that turn in an activity of its own."""


class PlanAndCall(msgspec.Struct, frozen=True, kw_only=True):
    """The input of :data:`PLAN_AND_CALL`: the planner turn's, the run's agent (which of
    its tools are agents, each tool's effect class) and the run's clock when it was sent."""

    plan: PlanTurnInput
    agent: AgentPlan
    not_before: datetime
    """The run's time when the turn was scheduled: the tool's result is stamped no earlier."""
    turn_after: bool = False
    """Run the planner turn the loop runs right after the call, too (see
    :func:`~agentledger.runtime.planner_input.turn_after_call`): ignored by a worker before
    it, which hands back no :class:`TurnAfter` (the loop then plans it as usual)."""
    trace: dict[str, str] = {}
    """The run span's context as a W3C carrier, when the run is traced: the planner turn
    after the call opens its span under it ({}: no span)."""

    @property
    def max_turn_attempts(self) -> int:
        """The planner turn's crash-loop limit (what the worker counts lost attempts against)."""
        return self.plan.max_turn_attempts


class TurnAfter(msgspec.Struct, frozen=True, kw_only=True):
    """What became of the planner turn a :data:`PLAN_AND_CALL` started after its lone call.

    ``plan`` is the turn's result when it is carried back; otherwise the
    turn is handed back to the workflow, which runs :data:`PLAN_AFTER_CALL`:
    with ``failure`` (the attempt's error, a TransientError's included),
    ``lost`` (it was interrupted, or an earlier attempt of the activity was
    lost after the call's result was recorded), or neither (its plan is
    recorded, but too large to carry back next to the rest).
    """

    plan: PlanTurnOutput | None = None
    failure: dict[str, Any] | None = None
    lost: bool = False
    trace: dict[str, str] = {}
    """The context of the turn's span, which the activity opened, as a W3C carrier: the
    parent of what the plan causes ({}: the activity opened none, or the turn was lost)."""


class PlanAndCallOutput(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :data:`PLAN_AND_CALL`: the planner turn's, and what became of the
    lone tool call it started (``call_id``; "" when it started none).

    ``tool`` is the call's result when it is carried back; otherwise the call
    is handed back to the workflow, which runs :data:`CALL_AFTER_PLAN`: with
    ``failure`` (the attempt's error, a TransientError's included), ``lost``
    (an earlier attempt of this activity recorded the plan and may have
    started the call, then was lost), or neither (the call's result is
    recorded, but too large to carry back next to the plan).
    """

    plan: PlanTurnOutput
    call_id: str = ""
    tool: ToolCallOutput | None = None
    failure: dict[str, Any] | None = None
    lost: bool = False
    after: TurnAfter | None = None
    """The planner turn after a carried call, when the activity started it (None: it did
    not, and the loop plans it as usual)."""


class CallAfterPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The input of :data:`CALL_AFTER_PLAN`: the loop's tool call, which a
    :data:`PLAN_AND_CALL` started once already (``lost``: without finishing)."""

    call: ToolCallInput
    """The call the loop asked for."""
    lost: bool = False

    @property
    def max_turn_attempts(self) -> int:
        """The call's crash-loop limit."""
        return self.call.max_turn_attempts

    @property
    def lost_before(self) -> int:
        """Lost attempts made before this activity (the worker counts them too)."""
        return int(self.lost)

    @property
    def started_before(self) -> int:
        """Attempts of the call made before this activity (its attempts count on)."""
        return 1


PLAN_AFTER_CALL = "agentledger.plan_turn_after_call"
"""The planner turn a :data:`PLAN_AND_CALL` started after its lone call without an outcome
to carry back: its attempts count on from the one made there."""


class PlanAfterCall(msgspec.Struct, frozen=True, kw_only=True):
    """The input of :data:`PLAN_AFTER_CALL`: the loop's planner turn, which a
    :data:`PLAN_AND_CALL` started once already (``lost``: without finishing)."""

    plan: PlanTurnInput
    """The turn the loop asked for."""
    lost: bool = False

    @property
    def max_turn_attempts(self) -> int:
        """The turn's crash-loop limit."""
        return self.plan.max_turn_attempts

    @property
    def lost_before(self) -> int:
        """Lost attempts made before this activity (the worker counts them too)."""
        return int(self.lost)

    @property
    def started_before(self) -> int:
        """Attempts of the turn made before this activity (its attempts count on)."""
        return 1


CALL_AND_PLAN = "agentledger.tool_call_and_plan"
"""The activity of a lone tool call (of a planner turn's step, not the one a
:data:`PLAN_AND_CALL` ran) that also runs the planner turn the loop runs right after it."""


class CallAndPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The input of :data:`CALL_AND_PLAN`: the loop's tool call, and the run's prompt (what
    the planner turn after it carries)."""

    call: ToolCallInput
    prompt: RenderedPrompt | None = None
    trace: dict[str, str] = {}
    """As :class:`PlanAndCall`'s: the run span's context, for the planner turn after it."""

    @property
    def max_turn_attempts(self) -> int:
        """The call's crash-loop limit (what the worker counts lost attempts against)."""
        return self.call.max_turn_attempts


class CallAndPlanOutput(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :data:`CALL_AND_PLAN`: the call's, and the planner turn after it when
    the activity started one (see :class:`TurnAfter`)."""

    tool: ToolCallOutput
    after: TurnAfter | None = None
