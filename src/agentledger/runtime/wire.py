"""What crosses the engine boundary: workflow input/output and activity messages.

All are msgspec Structs, so a durable engine can serialise them between the
workflow and its activities (or another process). Timestamps are chosen in
the workflow (``ctx.now()``) and carried here, so a retried activity writes
byte-identical records [X1].

Each activity writes the records of the work it does, with one
``append_run_records`` per write [B1]: ``begin_run`` starts the run and
records its prompt, history and input; ``plan_turn`` records its phase and
then its plan (and suspends the run when the plan waits for outside input);
``tool_call`` its result (a lone call). Records the loop decides
on its own (a tool step's results message, interrupted calls) ride along, as
``records``, with the next activity that writes. What a planner turn would
write first rides, on request, with the write before it (``BeginRunInput.planning``,
``ToolCallInput.then_turn``); the answer says whether it did, so a loop newer
than its worker writes it itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from agentledger.runtime.checkpoint import Awaiting, InDoubtToolCall, RunCheckpoint
from agentledger.runtime.planner import (
    Answer,
    PlanResult,
    RenderedPrompt,
    ToolCall,
    ToolOutcome,
)
from agentledger.runtime.records import RecordSpec
from agentledger.storage.derivation import CopiedFrom
from agentledger.storage.payloads import Failure
from agentledger.storage.types import RunStart, RunStatus, StartOutcome
from agentledger.transcript import Message, TextPart

__all__ = [
    "APPEND_RECORDS",
    "BEGIN_RUN",
    "COMPLETE_RUN",
    "PLAN_TURN",
    "STORE_ONLY",
    "SUSPEND_RUN",
    "TOOL_CALL",
    "AgentPlan",
    "AppendRecordsInput",
    "AppendRecordsOutput",
    "Awaiting",
    "BeginRunInput",
    "BeginRunOutput",
    "CompleteRunInput",
    "CompleteRunOutput",
    "PlanTurnInput",
    "PlanTurnOutput",
    "RunInput",
    "RunOutput",
    "SuspendRunInput",
    "ToolCallInput",
    "ToolCallOutput",
]

BEGIN_RUN = "agentledger.begin_run"
APPEND_RECORDS = "agentledger.append_records"
PLAN_TURN = "agentledger.plan_turn"
TOOL_CALL = "agentledger.tool_call"
SUSPEND_RUN = "agentledger.suspend_run"
COMPLETE_RUN = "agentledger.complete_run"

STORE_ONLY = frozenset({BEGIN_RUN, APPEND_RECORDS, SUSPEND_RUN, COMPLETE_RUN})
"""Activities that only talk to the store (short, never interrupted): an engine
may run them next to the workflow (Temporal local activities)."""

StartMode = Literal["root", "child", "one_shot", "one_shot_child"]


class _Wire(msgspec.Struct, frozen=True, kw_only=True):
    """Common options: immutable, keyword-only; unknown fields are ignored.

    Rolling deploys: during one, a message written by a newer worker (a field
    added since, with a default) reaches an older one, which must still decode
    it. Wrong types and missing required fields stay errors. A field the receiver
    must act on is not such a field: it needs a new activity or workflow version.
    """


class HistorySource(_Wire, frozen=True, kw_only=True):
    """A new run's history as a reference to another run's transcript, not a copy [V1]/[V2].

    ``next_turn``: the whole transcript of ``run_id``, a completed run of the same
    session (``through`` its last record); ``fork``: its transcript through the
    record ``through``. Workflow inputs carry this, never the history itself.
    """

    kind: Literal["next_turn", "fork"]
    run_id: str
    through: str
    exclude_reasoning: bool = False


class RunInput(_Wire, frozen=True, kw_only=True):
    """The input of one run's workflow."""

    run_id: str
    agent_id: str
    session_id: str = ""
    turn_id: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    messages: tuple[Message, ...] = ()
    """New runs: the history (seeded) then the user's new message (appended)."""
    history_from: HistorySource | None = None
    """New runs whose history is another run's transcript, by reference (before ``messages``)."""
    copied_from: CopiedFrom | None = None
    """[G2] New runs whose history (in ``messages``) was copied from another session's run."""
    parent_run_id: str = ""
    parent_agent_id: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    predecessor_run_id: str = ""
    answer: Answer | None = None
    """Continuations: the outside input that resumes the predecessor [K1]."""
    claim: str = ""
    """A queued message's turn: the claim of the runtime that starts it (recorded)."""

    @property
    def mode(self) -> StartMode:
        """Which store start this run needs."""
        if self.parent_run_id:
            return "child" if self.session_id else "one_shot_child"
        return "root" if self.session_id else "one_shot"


class RunOutput(_Wire, frozen=True, kw_only=True):
    """How a run ended, as its workflow returns it."""

    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    status: RunStatus
    final: Message | None = None
    """The final assistant message of a completed run."""
    failure: Failure | None = None
    cancellation_reason: str = ""
    awaiting: Awaiting | None = None
    """Set when ``status`` is ``suspended``."""
    finished_at: datetime | None = None
    """When the run's loop ended or suspended it, by the run's clock (None from a worker
    older than this field)."""

    @property
    def text(self) -> str:
        """The text of the final answer ("" when there is none)."""
        if self.final is None:
            return ""
        return "".join(p.text for p in self.final.parts if isinstance(p, TextPart))


class BeginRunInput(_Wire, frozen=True, kw_only=True):
    """Start the run ([L1]-[L4] by ``mode``) with its prompt, history and input records."""

    run: RunStart
    turn_id: str
    mode: StartMode
    at: datetime
    parent_agent_id: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    history: tuple[Message, ...] = ()
    """Messages given to a new run that existed before it (seeded)."""
    history_from: HistorySource | None = None
    """A new run's history by reference (recorded as ``transcript_messages_referenced``)."""
    copied_from: CopiedFrom | None = None
    """[G2] Where ``history`` was copied from (recorded as ``transcript_history_copied``)."""
    message: Message | None = None
    """A new run's new user message (appended, then the ``prompted`` phase)."""
    claim: str = ""
    """A queued message's turn: the claim of the runtime that starts it (recorded)."""
    planning: bool = False
    """Record turn 1's ``planning`` phase with the start too (a new run with ``message``,
    whose loop plans next): the loop's first planner turn then has nothing to write
    before it asks the planner. A request: the output says whether it was done."""


class AgentPlan(_Wire, frozen=True, kw_only=True):
    """What the loop must know of the agent: its limits and its agent tools."""

    max_turns: int
    agent_tools: dict[str, str] = msgspec.field(default_factory=dict)
    """Tool name -> agent id, for tools that run a child run."""
    max_turn_attempts: int = 3
    """Starts without finishing of one planner turn or tool call before the run pauses
    (``Agent.max_turn_attempts``)."""
    effects: dict[str, str] = msgspec.field(default_factory=dict)
    """Tool name -> effect class, for tools whose effect is not ``retry``."""

    def turn_after(self, turn: int) -> int:
        """The planner turn that follows turn ``turn``'s tool step (0: none, the agent is
        out of turns): the one a lone call's activity writes the first records of."""
        return turn + 1 if turn < self.max_turns else 0


class BeginRunOutput(_Wire, frozen=True, kw_only=True):
    """The start's decision [C2]; then the agent's plan, prompt and (continuations) checkpoint.

    ``failure`` says why preparing a started run failed (the loop ends it failed).
    """

    outcome: StartOutcome
    run_status: RunStatus
    agent: AgentPlan | None = None
    prompt: RenderedPrompt | None = None
    checkpoint: RunCheckpoint | None = None
    failure: Failure | None = None
    session_ended: bool = False
    planning: bool = False
    """Turn 1's ``planning`` phase is recorded with the start (``BeginRunInput.planning``;
    False from a worker older than this field: the loop records it itself)."""


class AppendRecordsInput(_Wire, frozen=True, kw_only=True):
    """Append ordinary records, in order, all stamped ``at``."""

    run: RunStart
    turn_id: str
    at: datetime
    records: tuple[RecordSpec, ...]


class AppendRecordsOutput(_Wire, frozen=True, kw_only=True):
    """Whether the run's session has ended (no new planner or tool work then [D2])."""

    session_ended: bool = False


class PlanTurnInput(_Wire, frozen=True, kw_only=True):
    """One planner turn (``resume`` picks ``plan_resume``), recorded at ``at``.

    ``records`` (what the loop still owes the log, ending with the turn's
    phase) are written and published first, in one transaction, so the
    stream shows them before the turn's model output; then the planner's plan
    is written in one more: notes, usage and the assistant message, and
    for tool calls the ``executing_tools`` phase and one
    ``tool_call_scheduled`` per call. A plan that awaits outside input is
    written with the run's suspension and its checkpoint [L6] (the retry of
    a lost completion finds it there). Without a plan, ``records`` are
    written alone.
    """

    run: RunStart
    turn_id: str
    turn: int
    resume: bool
    at: datetime
    records: tuple[RecordSpec, ...] = ()
    prompt: RenderedPrompt | None = None
    tool_results: tuple[ToolOutcome, ...] = ()
    answer: Answer | None = None
    max_turn_attempts: int = 0
    """Starts without finishing before the engine gives the turn up as a crash loop
    (0: no limit, as from a loop older than this field)."""
    complete: bool = False
    """A final plan ends the run: record its completion [L7] with the plan, in one
    transaction, where the engine's activities do that (in process; a Temporal worker
    looks for the session's next turn once a run ends, in ``complete_run``). A request:
    ``PlanTurnOutput.completed`` says whether it was done."""


class PlanTurnOutput(_Wire, frozen=True, kw_only=True):
    """The planner's result, or why the planner failed (never retried).

    ``recorded`` is True when the plan's records were written;
    ``suspended`` when the plan waits for outside input and the run is
    suspended with it (its checkpoint stored); ``session_ended`` when the
    session ended before the planner was asked (then there is neither result
    nor failure) [D2].
    """

    result: PlanResult | None = None
    failure: Failure | None = None
    recorded: bool = False
    suspended: bool = False
    session_ended: bool = False
    finished_at: datetime | None = None
    """When the turn finished, stamped by an engine whose run clock comes from its
    history (Temporal); None from the others."""
    completed: bool = False
    """The final plan was recorded with the run's completion (``PlanTurnInput.complete``):
    the run has ended."""


class ToolCallInput(_Wire, frozen=True, kw_only=True):
    """Run one tool call of step ``step`` and record its result at ``at``."""

    run: RunStart
    turn_id: str
    call: ToolCall
    step: str = ""
    at: datetime | None = None
    """When set, the result is recorded (``tool_result_received``) by the activity."""
    max_turn_attempts: int = 0
    """Starts without finishing before the engine gives the call up as a crash loop
    (0: no limit, as from a loop older than this field)."""
    effect: str = "retry"
    """The tool's effect class, as the run recorded it (``once``: never run again when
    an earlier attempt may have run it)."""
    key: str = ""
    """The call's idempotency key ("": derived from this run's id and the call id)."""
    attempts_before: int = 0
    """Attempts of this call made by earlier runs (a continuation running it again)."""
    started_at: datetime | None = None
    """A once call: when its ``tool_call_started`` record was written."""
    then_turn: int = 0
    """With ``at``, a lone call of a planner turn's step: record with its result, in the
    same transaction, what planner turn ``then_turn`` would write first (the step's
    results message and the turn's ``synthesizing`` phase, taking the steering messages
    waiting for the run). A request: ``ToolCallOutput.settled`` says whether it was done."""


class ToolCallOutput(_Wire, frozen=True, kw_only=True):
    """One call's outcome, as recorded; whether the session has ended [D2]."""

    outcome: ToolOutcome
    session_ended: bool = False
    finished_at: datetime | None = None
    """When the call finished, stamped by an engine whose run clock comes from its
    history (Temporal); None from the others."""
    in_doubt: InDoubtToolCall | None = None
    """A once call started before whose outcome is unknown: not called again; ``outcome``
    is then an error saying so, and the loop suspends the run to ask the host."""
    settled: bool = False
    """The step's results message and the next turn's phase are recorded with the result
    (``ToolCallInput.then_turn``; False from a worker older than this field)."""


class SuspendRunInput(_Wire, frozen=True, kw_only=True):
    """Suspend the run with its checkpoint [L6], ``records`` first, in one transaction."""

    run: RunStart
    turn_id: str
    at: datetime
    checkpoint: RunCheckpoint
    records: tuple[RecordSpec, ...] = ()
    records_at: datetime | None = None
    """When ``records`` were decided (their timestamp; ``at`` when unset)."""


class CompleteRunInput(_Wire, frozen=True, kw_only=True):
    """End the run [L7], ``records`` first, in one transaction; a canceled run repeats its
    reason [C1]/[C3]."""

    run: RunStart
    turn_id: str
    at: datetime
    status: RunStatus
    failure: Failure | None = None
    records: tuple[RecordSpec, ...] = ()
    records_at: datetime | None = None
    """When ``records`` were decided (their timestamp; ``at`` when unset)."""


class CompleteRunOutput(_Wire, frozen=True, kw_only=True):
    """The reason the terminal record carries (canceled runs only)."""

    cancellation_reason: str = ""
    waiting: bool | None = None
    """Whether a message of the run's session waited for its turn once the ending was
    written; None when nobody looked (an engine that starts the session's next turn
    itself looks: the Temporal worker, see :mod:`agentledger.engine.temporal.queue`)."""
