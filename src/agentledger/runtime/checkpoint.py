"""The suspension checkpoint: what a suspended run needs to be continued [L6].

A run suspends because its planner waits for outside input (``awaiting``),
because child runs it started did (``children``), or because one planner turn
or tool call was started ``max_turn_attempts`` times without finishing
(``crash_loop``: its worker kept dying). For children and a looping tool call
the checkpoint also keeps the whole tool step (its calls, the results that
came in, the text that goes with them), so the continuation can answer the
first child and continue it [K1], or run the calls still without a result
again, and finish the step.

Stored as the private bytes of the store's ``Checkpoint``. It is versioned
and decoded strictly: a checkpoint of an unknown version, with unknown or
missing fields, or not JSON at all is refused, never guessed at, because a
continuation built from a misread checkpoint would answer the wrong question.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agentledger.errors import ValidationError
from agentledger.runtime.planner import (
    Await,
    AwaitClarification,
    AwaitConfirmation,
    ToolCall,
    ToolOutcome,
)
from agentledger.runtime.records import decode_json, encode_json

__all__ = ["CHECKPOINT_VERSION", "Awaiting", "ChildWait", "CrashLoop", "RunCheckpoint"]

CHECKPOINT_VERSION = 1
"""The version this runtime writes and reads."""


class Awaiting(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a suspended run waits for: the question a host answers with ``resume``.

    For a run suspended by its child, this is the innermost question, and
    ``run_id``/``agent_id`` name the run that asked it.

    ``crash_loop``: the run paused because one planner turn or tool call
    (``activity``) was started ``attempts`` times without finishing (its
    worker kept dying). ``question`` says so in words; ``calls`` are the tool
    calls that will run again. ``resume`` with an empty ``Answer()`` runs the
    unfinished work again (the planner turn, or the calls still without a
    result); ``cancel`` ends the run canceled.
    """

    kind: Literal["clarification", "confirmation", "external_tools", "crash_loop"]
    question: str = ""
    calls: tuple[ToolCall, ...] = ()
    run_id: str = ""
    """The run that asked (this run, or a descendant that suspended it)."""
    agent_id: str = ""
    """The agent of that run."""
    activity: str = ""
    """``crash_loop``: the activity that kept dying (``agentledger.plan_turn`` or
    ``agentledger.tool_call``)."""
    attempts: int = 0
    """``crash_loop``: how many times it was started without finishing."""

    @classmethod
    def of(cls, awaiting: Await, *, run_id: str, agent_id: str) -> Awaiting:
        """What a planner's ``await_`` asks, as asked by ``run_id``."""
        if isinstance(awaiting, AwaitClarification):
            return cls(
                kind="clarification", question=awaiting.question, run_id=run_id, agent_id=agent_id
            )
        if isinstance(awaiting, AwaitConfirmation):
            return cls(
                kind="confirmation",
                question=awaiting.prompt,
                calls=awaiting.calls,
                run_id=run_id,
                agent_id=agent_id,
            )
        return cls(kind="external_tools", calls=awaiting.calls, run_id=run_id, agent_id=agent_id)


class CrashLoop(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A planner turn or tool call started ``attempts`` times without finishing."""

    activity: str
    """The activity's name (``agentledger.plan_turn`` or ``agentledger.tool_call``)."""
    attempts: int
    """How many times it was started without finishing (the agent's ``max_turn_attempts``)."""
    calls: tuple[ToolCall, ...] = ()
    """The tool calls that kept dying (none for a planner turn)."""
    resume: bool = False
    """A planner turn: whether it was a later turn (``plan_resume``) or the first one."""

    def awaiting(self, *, run_id: str, agent_id: str) -> Awaiting:
        """The pause as the question a host answers."""
        what = (
            f"tool call(s) {', '.join(c.name for c in self.calls)}"
            if self.calls
            else "the planner turn"
        )
        return Awaiting(
            kind="crash_loop",
            question=f"{what} ({self.activity}) started {self.attempts} times without "
            "finishing; resume to run it again, or cancel the run",
            calls=self.calls,
            run_id=run_id,
            agent_id=agent_id,
            activity=self.activity,
            attempts=self.attempts,
        )


class ChildWait(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tool call whose child run suspended: the run to continue and what it asks."""

    call: ToolCall
    run_id: str
    """The suspended child run (the predecessor of its continuation [K1])."""
    agent_id: str
    awaiting: Awaiting
    """The innermost question below this child."""


class RunCheckpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Why a run suspended and which tool calls (if any) wait for an answer.

    Exactly one of ``awaiting`` (the planner waits) and ``children`` (child
    runs wait) or ``crash_loop`` (a turn's activity kept dying; children of
    the same step may wait too) is set.
    """

    version: int
    """Checkpoint format version; only :data:`CHECKPOINT_VERSION` is read."""
    agent_id: str
    """The agent that suspended (a continuation must be the same agent [K1])."""
    turn: int
    """The planner turn that asked for outside input."""
    awaiting: Await | None = None
    """What the planner waits for: a clarification, a confirmation or external tool results."""
    children: tuple[ChildWait, ...] = ()
    """Suspended child runs, in call order; a resume answers the first."""
    calls: tuple[ToolCall, ...] = ()
    """With ``children`` or a looping tool call: every call of the suspended tool step, in
    order."""
    results: tuple[ToolOutcome, ...] = ()
    """With ``children`` or a looping tool call: the results of that step already in
    (recorded by this run); with a looping planner turn: the tool results it was given."""
    text: str = ""
    """With ``children``: user text that follows the step's results in the transcript."""
    crash_loop: CrashLoop | None = None
    """The planner turn or tool calls that kept dying (the run paused, see :class:`CrashLoop`)."""

    def __post_init__(self) -> None:
        if (self.awaiting is None) == (not self.children and self.crash_loop is None):
            raise ValueError(
                "a checkpoint holds exactly one of awaiting and children or crash_loop"
            )

    @property
    def kind(
        self,
    ) -> Literal["clarification", "confirmation", "external_tools", "child", "crash_loop"]:
        """The kind of input awaited (``child``: a child run waits for it; ``crash_loop``:
        the host decides whether the work that kept dying runs again)."""
        if self.crash_loop is not None:
            return "crash_loop"
        if self.awaiting is None:
            return "child"
        if isinstance(self.awaiting, AwaitClarification):
            return "clarification"
        return (
            "confirmation"
            if self.awaiting.__struct_config__.tag == "confirmation"
            else "external_tools"
        )

    @property
    def pending(self) -> tuple[ToolCall, ...]:
        """Tool calls whose tool_use is in the transcript without a result yet."""
        if self.crash_loop is not None and not self.calls:
            return ()  # a planner turn: no tool use waits
        if self.awaiting is None:
            done = {o.tool_call_id for o in self.results}
            return tuple(c for c in self.calls if c.id not in done)
        if isinstance(self.awaiting, AwaitClarification):
            return ()
        return self.awaiting.calls

    def encode(self) -> bytes:
        """The checkpoint's bytes."""
        return encode_json(self)

    @classmethod
    def decode(cls, data: bytes) -> RunCheckpoint:
        """Decode exactly one checkpoint of the current version.

        Raises:
            ValidationError: anything else (``field="checkpoint"``).
        """
        try:
            version = _VERSION.decode(data).version
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise ValidationError(
                field="checkpoint", expected="a run checkpoint", got=str(e)
            ) from e
        if version != CHECKPOINT_VERSION:
            raise ValidationError(
                field="checkpoint.version", expected=str(CHECKPOINT_VERSION), got=version
            )
        try:
            checkpoint: RunCheckpoint = decode_json(data, RunCheckpoint)
            return checkpoint
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise ValidationError(
                field="checkpoint", expected="a run checkpoint", got=str(e)
            ) from e


class _Version(msgspec.Struct, frozen=True):
    """Just the version, read first so a newer format is named as such."""

    version: int


_VERSION = msgspec.json.Decoder(_Version)
