"""The suspension checkpoint: what a suspended run needs to be continued [L6].

A run suspends because its planner waits for outside input (``awaiting``),
or because its tool step waits: child runs it started did (``children``),
``once`` tool calls are in doubt (``in_doubt``: started, outcome unknown), or
one planner turn or tool call was started ``max_turn_attempts`` times without
finishing (``crash_loop``: its worker kept dying). A waiting step's
checkpoint also keeps the whole tool step (its calls, the results that came
in, the text that goes with them), so the continuation can answer the first
question (a crash loop, then an in-doubt call, then a child), run what is
still without a result, and finish the step.

Stored as the private bytes of the store's ``Checkpoint``. It is versioned
and decoded strictly: a checkpoint of an unknown version, with unknown or
missing fields, or not JSON at all is refused, never guessed at, because a
continuation built from a misread checkpoint would answer the wrong question.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

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
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.types import Checkpoint, RunStart, RunSuspension

__all__ = [
    "CHECKPOINT_VERSION",
    "Awaiting",
    "ChildWait",
    "CrashLoop",
    "InDoubtToolCall",
    "RunCheckpoint",
    "checkpoint_id",
    "step_checkpoint",
    "suspension",
]

CHECKPOINT_VERSION = 1
"""The version this runtime writes and reads."""


class InDoubtToolCall(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A ``once`` tool call that was started and whose outcome is unknown (a crash or a
    lost answer came between): the runtime never calls it again on its own.

    Answer it with ``ToolHappened(result)``, ``ToolRetry()`` or ``ToolFailed(reason)``.
    """

    tool_name: str
    tool_call_id: str
    key: str
    """The call's idempotency key (what the tool was given)."""
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    started_at: datetime
    """When the ``tool_call_started`` record of the attempt in doubt was written."""
    attempt: int
    """The attempt in doubt (1 for the first)."""


class Awaiting(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a suspended run waits for: the question a host answers with ``resume``.

    For a run suspended by its child, this is the innermost question, and
    ``run_id``/``agent_id`` name the run that asked it. ``in_doubt`` names the
    call in doubt when ``kind`` is ``in_doubt``.

    ``crash_loop``: the run paused because one planner turn or tool call
    (``activity``) was started ``attempts`` times without finishing (its
    worker kept dying). ``question`` says so in words; ``calls`` are the tool
    calls that kept dying. ``resume`` with an empty ``Answer()`` runs the
    unfinished work again (the planner turn, or the calls still without a
    result); ``Answer(approved=False)`` ends the run (failed, kind
    ``crash_loop``).
    """

    kind: Literal["clarification", "confirmation", "external_tools", "in_doubt", "crash_loop"]
    question: str = ""
    calls: tuple[ToolCall, ...] = ()
    run_id: str = ""
    """The run that asked (this run, or a descendant that suspended it)."""
    agent_id: str = ""
    """The agent of that run."""
    in_doubt: InDoubtToolCall | None = None
    """The call in doubt (kind ``in_doubt``)."""
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
            "finishing; resume with an empty answer to run it again, or with approved=False "
            "to end the run",
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

    Either ``awaiting`` (the planner waits) is set, or the tool step waits
    (``children``: child runs wait; ``in_doubt``: once calls in doubt;
    ``crash_loop``: a planner turn or tool calls kept dying), not both.
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
    in_doubt: tuple[InDoubtToolCall, ...] = ()
    """Once calls of the step in doubt, in call order; a resume decides the first."""
    origin_run_id: str = ""
    """The run that scheduled the step's calls (their idempotency keys derive from it);
    "" for this run."""
    crash_loop: CrashLoop | None = None
    """The planner turn or tool calls that kept dying (the run paused, see :class:`CrashLoop`)."""

    def __post_init__(self) -> None:
        waits = bool(self.children or self.in_doubt or self.crash_loop is not None)
        if (self.awaiting is None) == (not waits):
            raise ValueError("a checkpoint holds exactly one of awaiting and a waiting step")

    @property
    def kind(
        self,
    ) -> Literal[
        "clarification", "confirmation", "external_tools", "child", "in_doubt", "crash_loop"
    ]:
        """The kind of input awaited (``child``: a child run waits for it; ``in_doubt``: the
        host decides a once call in doubt, asked before the step's children; ``crash_loop``:
        the host decides whether the work that kept dying runs again, asked first)."""
        if self.crash_loop is not None:
            return "crash_loop"
        if self.in_doubt:
            return "in_doubt"
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
        if self.awaiting is None:  # a waiting step
            done = {o.tool_call_id for o in self.results}
            return tuple(c for c in self.calls if c.id not in done)
        if isinstance(self.awaiting, AwaitClarification):
            return ()
        return self.awaiting.calls

    def asked(self, *, run_id: str, agent_id: str) -> Awaiting:
        """The question this checkpoint puts to the host, as asked by ``run_id``: the first
        call in doubt, else the first waiting child's question, else the planner's; a crash
        loop before all of them."""
        if self.crash_loop is not None:
            return self.crash_loop.awaiting(run_id=run_id, agent_id=agent_id)
        if self.in_doubt:
            doubt = self.in_doubt[0]
            call = next((c for c in self.calls if c.id == doubt.tool_call_id), None)
            return Awaiting(
                kind="in_doubt",
                question=(
                    f"tool {doubt.tool_name} (call {doubt.tool_call_id}, attempt "
                    f"{doubt.attempt}) was started and its outcome is unknown: did it happen?"
                ),
                calls=(call,) if call is not None else (),
                run_id=run_id,
                agent_id=agent_id,
                in_doubt=doubt,
            )
        if self.children:
            return self.children[0].awaiting
        assert self.awaiting is not None
        return Awaiting.of(self.awaiting, run_id=run_id, agent_id=agent_id)

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


def step_checkpoint(
    *,
    agent_id: str,
    turn: int,
    calls: tuple[ToolCall, ...],
    results: tuple[ToolOutcome, ...],
    children: tuple[ChildWait, ...] = (),
    in_doubt: tuple[InDoubtToolCall, ...] = (),
    text: str = "",
    origin_run_id: str = "",
    crash_loop: CrashLoop | None = None,
) -> RunCheckpoint:
    """The checkpoint of a tool step that waits for the host (the loop's and repair's)."""
    return RunCheckpoint(
        version=CHECKPOINT_VERSION,
        agent_id=agent_id,
        turn=turn,
        children=children,
        calls=calls,
        results=results,
        text=text,
        in_doubt=in_doubt,
        origin_run_id=origin_run_id,
        crash_loop=crash_loop,
    )


def checkpoint_id(run_id: str) -> str:
    """The id under which the runtime stores run ``run_id``'s checkpoint (a checkpoint
    under another id was stored by some other writer, whose bytes are its own)."""
    return f"{run_id}:suspension"


def suspension(
    run: RunStart, turn_id: str, at: datetime, checkpoint: RunCheckpoint
) -> RunSuspension:
    """[L6] the command that suspends ``run`` with ``checkpoint`` (the loop's and repair's)."""
    pending = checkpoint.pending
    return RecordBuilder(run, turn_id=turn_id).suspension(
        Checkpoint(id=checkpoint_id(run.run_id), data=checkpoint.encode()),
        at=at,
        pending_count=len(pending) or 1,
        required_tools=tuple(c.name for c in pending),
        version=CHECKPOINT_VERSION,
    )


class _Version(msgspec.Struct, frozen=True):
    """Just the version, read first so a newer format is named as such."""

    version: int


_VERSION = msgspec.json.Decoder(_Version)
