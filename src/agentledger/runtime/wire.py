"""What crosses the engine boundary: workflow input/output and activity messages.

All are msgspec Structs, so a durable engine can serialise them between the
workflow and its activities (or another process). Timestamps are chosen in
the workflow (``ctx.now()``) and carried here, so a retried activity writes
byte-identical records [X1].
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from agentledger.runtime.checkpoint import Awaiting, RunCheckpoint
from agentledger.runtime.planner import (
    Answer,
    PlanResult,
    RenderedPrompt,
    ToolCall,
    ToolOutcome,
)
from agentledger.runtime.records import RecordSpec
from agentledger.storage.payloads import Failure
from agentledger.storage.types import RunStart, RunStatus, StartOutcome
from agentledger.transcript import Message, TextPart

__all__ = [
    "APPEND_RECORDS",
    "COMPLETE_RUN",
    "PLAN_TURN",
    "PREPARE_RUN",
    "START_RUN",
    "SUSPEND_RUN",
    "TOOL_CALL",
    "AgentPlan",
    "AppendRecordsInput",
    "AppendRecordsOutput",
    "Awaiting",
    "CompleteRunInput",
    "CompleteRunOutput",
    "PlanTurnInput",
    "PlanTurnOutput",
    "PrepareRunInput",
    "PrepareRunOutput",
    "RunInput",
    "RunOutput",
    "StartRunInput",
    "StartRunOutput",
    "SuspendRunInput",
    "ToolCallInput",
]

START_RUN = "agentledger.start_run"
PREPARE_RUN = "agentledger.prepare_run"
APPEND_RECORDS = "agentledger.append_records"
PLAN_TURN = "agentledger.plan_turn"
TOOL_CALL = "agentledger.tool_call"
SUSPEND_RUN = "agentledger.suspend_run"
COMPLETE_RUN = "agentledger.complete_run"

StartMode = Literal["root", "child", "one_shot", "one_shot_child"]


class _Wire(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Common options: immutable, keyword-only, strict."""


class RunInput(_Wire, frozen=True, kw_only=True):
    """The input of one run's workflow."""

    run_id: str
    agent_id: str
    session_id: str = ""
    turn_id: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    messages: tuple[Message, ...] = ()
    """New runs: the history (seeded) then the user's new message (appended)."""
    parent_run_id: str = ""
    parent_agent_id: str = ""
    tool_name: str = ""
    tool_call_id: str = ""
    predecessor_run_id: str = ""
    answer: Answer | None = None
    """Continuations: the outside input that resumes the predecessor [K1]."""

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

    @property
    def text(self) -> str:
        """The text of the final answer ("" when there is none)."""
        if self.final is None:
            return ""
        return "".join(p.text for p in self.final.parts if isinstance(p, TextPart))


class StartRunInput(_Wire, frozen=True, kw_only=True):
    """Start the run in the store: [L1], [L2], [L3] or [L4] by ``mode``."""

    run: RunStart
    turn_id: str
    mode: StartMode
    parent_agent_id: str = ""
    tool_name: str = ""
    tool_call_id: str = ""


class StartRunOutput(_Wire, frozen=True, kw_only=True):
    """The start's decision: proceed, or stop because the session ended [C2]."""

    outcome: StartOutcome
    run_status: RunStatus


class PrepareRunInput(_Wire, frozen=True, kw_only=True):
    """Record the prompt and the seeded transcript; load what the loop needs."""

    run: RunStart
    turn_id: str
    at: datetime
    history: tuple[Message, ...] = ()
    """Messages given to a new run that existed before it (seeded)."""


class AgentPlan(_Wire, frozen=True, kw_only=True):
    """What the loop must know of the agent: its limits and its agent tools."""

    max_turns: int
    agent_tools: dict[str, str] = msgspec.field(default_factory=dict)
    """Tool name -> agent id, for tools that run a child run."""


class PrepareRunOutput(_Wire, frozen=True, kw_only=True):
    """The agent's plan, its rendered prompt and (for a continuation) the checkpoint."""

    agent: AgentPlan
    prompt: RenderedPrompt | None = None
    checkpoint: RunCheckpoint | None = None


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
    """Ask the planner for the next step (``resume`` picks ``plan_resume``)."""

    run: RunStart
    turn_id: str
    turn: int
    resume: bool
    prompt: RenderedPrompt | None = None
    tool_results: tuple[ToolOutcome, ...] = ()
    answer: Answer | None = None


class PlanTurnOutput(_Wire, frozen=True, kw_only=True):
    """The planner's result, or why the planner failed (never retried)."""

    result: PlanResult | None = None
    failure: Failure | None = None


class ToolCallInput(_Wire, frozen=True, kw_only=True):
    """Run one tool call."""

    run: RunStart
    turn_id: str
    call: ToolCall


class SuspendRunInput(_Wire, frozen=True, kw_only=True):
    """Suspend the run with its checkpoint [L6]."""

    run: RunStart
    turn_id: str
    at: datetime
    checkpoint: RunCheckpoint


class CompleteRunInput(_Wire, frozen=True, kw_only=True):
    """End the run [L7]; a canceled run repeats its recorded reason [C1] or [C3]."""

    run: RunStart
    turn_id: str
    at: datetime
    status: RunStatus
    failure: Failure | None = None


class CompleteRunOutput(_Wire, frozen=True, kw_only=True):
    """The reason the terminal record carries (canceled runs only)."""

    cancellation_reason: str = ""
