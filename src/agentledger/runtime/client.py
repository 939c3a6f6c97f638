"""AgentClient: how a host starts, waits for, cancels and resumes runs of one agent.

Input is checked here, before the engine accepts anything, so a bad call
raises at once and leaves no workflow and no record behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentledger.engine.base import ActivityFailedError
from agentledger.errors import (
    AgentledgerError,
    CorruptRecordError,
    RunNotActiveError,
    RunSessionMismatchError,
    SessionBusyError,
    TranscriptError,
    ValidationError,
)
from agentledger.runtime.busy import QueuedRunHandle, check_policy, one_message
from agentledger.runtime.checkpoint import RunCheckpoint
from agentledger.runtime.planner import Answer, ToolFailed, ToolHappened, ToolRetry
from agentledger.runtime.wire import HistorySource, RunInput, RunOutput
from agentledger.storage.derivation import CopiedFrom
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log, without_reasoning
from agentledger.storage.types import BusyPolicy, RunStatus
from agentledger.transcript import Message, TextPart, ToolResultPart, validate_planner_transcript

if TYPE_CHECKING:
    from agentledger.runtime.runtime import Runtime

__all__ = ["AgentClient", "RunHandle"]


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _check_messages(
    messages: Sequence[Message] | str, *, after: bool = False
) -> tuple[Message, ...]:
    """The run's messages; a string is one user message. A run that follows another
    (``after``) takes its history from it: only the new user message is given."""
    if isinstance(messages, str):
        if not messages:
            raise ValidationError(field="messages", expected="a non-empty text", got=messages)
        messages = (Message(role="user", parts=(TextPart(text=messages),)),)
    items = tuple(messages)
    if not items:
        raise ValidationError(field="messages", expected="at least one message", got=items)
    if after and len(items) != 1:
        raise ValidationError(
            field="messages",
            expected="only the new user message (after= brings the history)",
            got=f"{len(items)} messages",
        )
    validate_planner_transcript(items)
    if items[-1].role != "user":
        raise ValidationError(
            field="messages",
            expected="the last message to be the user's new message",
            got=items[-1].role,
        )
    return items


def _check_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(labels or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in out.items()):
        raise ValidationError(field="labels", expected="a mapping of str to str", got=labels)
    return out


def _check_id(field: str, value: str | None) -> str:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValidationError(field=field, expected="a non-empty string or None", got=value)
    return value or ""


async def _load_checkpoint(store: Store, run_id: str) -> RunCheckpoint:
    stored = await store.load_run_suspension(run_id)
    try:
        return RunCheckpoint.decode(stored.data)
    except ValidationError as e:
        raise CorruptRecordError(run_id=run_id, record_id="", reason=f"checkpoint: {e}") from e


async def _innermost_checkpoint(store: Store, run_id: str) -> RunCheckpoint:
    """The checkpoint of the run that asked: ``run_id``'s, or its first waiting child's, down
    (a run paused by a crash loop, or with a call in doubt, asks itself first, even when
    children of its step wait)."""
    checkpoint = await _load_checkpoint(store, run_id)
    seen = {run_id}
    while checkpoint.kind == "child":
        child = checkpoint.children[0].run_id
        if child in seen:
            raise CorruptRecordError(run_id=child, record_id="", reason="checkpoint: a cycle")
        seen.add(child)
        checkpoint = await _load_checkpoint(store, child)
    return checkpoint


def _check_answer(checkpoint: RunCheckpoint, answer: Answer) -> None:
    """The answer must answer what the run waits for; refuse it before starting anything."""
    if checkpoint.kind == "in_doubt" and answer.decision is None:
        raise ValidationError(
            field="answer",
            expected=(
                "ToolHappened(result), ToolRetry() or ToolFailed(reason): the run waits "
                "for a decision on a tool call in doubt"
            ),
            got=answer,
        )
    if checkpoint.kind != "in_doubt" and answer.decision is not None:
        raise ValidationError(
            field="answer",
            expected=f"an answer to a {checkpoint.kind} question, not a decision on a tool call",
            got=answer.decision,
        )
    if checkpoint.kind == "confirmation" and answer.approved is None:
        raise ValidationError(
            field="answer.approved",
            expected="True or False: the run waits for a confirmation",
            got=None,
        )
    pending = {c.id for c in checkpoint.pending}
    unknown = sorted(set(answer.tool_results) - pending)
    if unknown:
        raise ValidationError(
            field="answer.tool_results",
            expected=f"results only for the pending calls {sorted(pending)}",
            got=unknown,
        )


class RunHandle:
    """A started run: wait for its output or cancel it."""

    def __init__(self, runtime: Runtime, run_id: str) -> None:
        self._runtime = runtime
        self.run_id = run_id
        """The run's id (also its workflow id)."""

    async def wait(self) -> RunOutput:
        """Wait for the run to end (or suspend) and return how it ended.

        Raises:
            AgentledgerError: the run could not start (unknown session, ended
                agent ...), or its final record could not be written: the
                store's own error when there is one, else ``ActivityFailedError``
                (or ``ChildFailedError`` for a workflow that ended without output),
                both in the same tree, with their fields.
        """
        try:
            output: RunOutput = await self._runtime.engine.result(self.run_id)
        except ActivityFailedError as e:
            if isinstance(e.error, AgentledgerError):
                raise e.error from None
            raise
        return output

    async def cancel(self, reason: str) -> None:
        """Cancel the run [C1]: record ``reason``, then stop it at its next safe point."""
        await self._runtime.cancel_run(self.run_id, reason)

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id}>"


class AgentClient:
    """Runs of one registered agent. Get one from ``runtime.agent_client(agent_id)``."""

    def __init__(self, runtime: Runtime, agent_id: str) -> None:
        self._runtime = runtime
        self.agent_id = agent_id

    async def _start(self, inp: RunInput) -> RunHandle:
        self._runtime._close_registration()
        self._runtime._registry.agent(self.agent_id)
        await self._runtime.engine.start(inp.run_id, inp)
        return RunHandle(self._runtime, inp.run_id)

    async def start(
        self,
        session_id: str,
        messages: Sequence[Message] | str,
        turn_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        *,
        after: str | None = None,
        exclude_reasoning: bool = False,
        if_busy: str | None = None,
    ) -> RunHandle | QueuedRunHandle:
        """Start a run in ``session_id``; ``messages`` is the history then the new user message.

        Messages before the last are recorded as seeded, the last as appended [R1].
        A string is one user message.

        ``after`` names the previous turn, a completed run of the same session:
        the new run's history is that run's whole transcript, stored as a
        reference to it rather than a copy, so a conversation's storage grows
        with what each turn adds [V1]. ``messages`` is then only the new user
        message. ``exclude_reasoning`` leaves the earlier turns' thinking out of
        the history (and out of every later turn's that follows this one).

        ``if_busy`` (default: the agent's ``if_busy``) says what the message does
        when the session's latest turn is still running: ``"reject"``
        (``SessionBusyError``), ``"queue"`` (its turn starts when the turns ahead
        of it end), ``"interrupt"`` (the running run is canceled, then its turn
        starts) or ``"steer"`` (meant for the running run; in this version it
        becomes the next turn, like a queued one). With a policy, ``messages`` is
        the one new user message: its history is the session's latest turn (or
        ``after``), by reference; the handle's ``message`` says where it stood.

        Raises:
            RunNotActiveError: ``after`` has not completed.
            SessionBusyError: ``after`` (or, with ``if_busy="reject"``, the
                session's latest turn) is still running.
            RunSessionMismatchError: ``after`` belongs to another session.
        """
        if not isinstance(session_id, str) or not session_id:
            raise ValidationError(field="session_id", expected="a non-empty string", got=session_id)
        policy = check_policy(
            if_busy if if_busy is not None else self._runtime._registry.if_busy(self.agent_id)
        )
        if if_busy is not None or policy is not BusyPolicy.REJECT:
            if exclude_reasoning:
                raise ValidationError(
                    field="exclude_reasoning",
                    expected="False with if_busy (the turn follows the session's latest turn)",
                    got=exclude_reasoning,
                )
            self._runtime._close_registration()
            return await self._runtime._busy.submit(
                self.agent_id,
                session_id,
                one_message(messages),
                policy=policy,
                after=_check_id("after", after),
                turn_id=_check_id("turn_id", turn_id) or _new_id("turn"),
                run_id=_check_id("run_id", run_id) or _new_id("run"),
                labels=_check_labels(labels),
            )
        checked = _check_messages(messages, after=bool(after))
        source = None
        if after is not None:
            source = await self._next_turn(session_id, _check_id("after", after), exclude_reasoning)
        elif exclude_reasoning:
            raise ValidationError(
                field="exclude_reasoning",
                expected="False without after= (it applies to a referenced history)",
                got=exclude_reasoning,
            )
        inp = RunInput(
            run_id=_check_id("run_id", run_id) or _new_id("run"),
            agent_id=self.agent_id,
            session_id=session_id,
            turn_id=_check_id("turn_id", turn_id) or _new_id("turn"),
            labels=_check_labels(labels),
            messages=checked,
            history_from=source,
        )
        return await self._start(inp)

    async def _next_turn(
        self, session_id: str, after: str, exclude_reasoning: bool
    ) -> HistorySource:
        """[V1] the reference to ``after``'s whole transcript, checked before anything starts."""
        meta = await self._runtime.store.load_run(after)
        if meta.session_id != session_id:
            raise RunSessionMismatchError(run_id=after, expected=session_id, got=meta.session_id)
        if meta.status is RunStatus.RUNNING:
            raise SessionBusyError(session_id=session_id, run_id=after)
        if meta.status is not RunStatus.COMPLETED:
            raise RunNotActiveError(run_id=after, expected="completed", got=meta.status.value)
        return HistorySource(
            kind="next_turn",
            run_id=after,
            through=meta.last_record_id,
            exclude_reasoning=bool(exclude_reasoning),
        )

    async def run(
        self,
        session_id: str,
        messages: Sequence[Message] | str,
        turn_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        *,
        after: str | None = None,
        exclude_reasoning: bool = False,
        if_busy: str | None = None,
    ) -> RunOutput:
        """Start a run and wait for it (see :meth:`start`)."""
        handle = await self.start(
            session_id,
            messages,
            turn_id=turn_id,
            labels=labels,
            run_id=run_id,
            after=after,
            exclude_reasoning=exclude_reasoning,
            if_busy=if_busy,
        )
        return await handle.wait()

    async def start_fork(
        self,
        source_run_id: str,
        message: Message | str,
        through: str | None = None,
        session_id: str | None = None,
        *,
        turn_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
        exclude_reasoning: bool = False,
    ) -> RunHandle:
        """Start a new branch of a conversation [V2]: its history is ``source_run_id``'s
        transcript through its record ``through`` (its end when None), then ``message``.

        In the source's own session the history is stored as a reference; into
        another session (``session_id``) it is copied once, since sessions are
        purged independently and no reference crosses one. The history must end
        where a new user message may follow: not between a tool call and its result.

        Raises:
            ValidationError: ``through`` is not a record of the source, or cuts
                a tool call from its result; a sessionless source with no ``session_id``.
        """
        source_run_id = _check_id("source_run_id", source_run_id)
        if not source_run_id:
            raise ValidationError(field="source_run_id", expected="a run id", got=source_run_id)
        (new,) = _check_messages(message if isinstance(message, str) else (message,))
        store = self._runtime.store
        meta = await store.load_run(source_run_id)
        cut = _check_id("through", through) or meta.last_record_id
        history = await build_messages_from_run_log(store, source_run_id, through=cut, full=True)
        if exclude_reasoning:
            history = without_reasoning(history)
        try:
            validate_planner_transcript((*history, new))
        except TranscriptError as e:
            raise ValidationError(
                field="through",
                expected=f"a record of run {source_run_id} after which a user message may follow",
                got=f"{cut} ({e})",
            ) from e
        target = _check_id("session_id", session_id) or meta.session_id
        if not target:
            raise ValidationError(
                field="session_id",
                expected="a session for the fork (its source belongs to none)",
                got=session_id,
            )
        inp = RunInput(
            run_id=_check_id("run_id", run_id) or _new_id("run"),
            agent_id=self.agent_id,
            session_id=target,
            turn_id=_check_id("turn_id", turn_id) or _new_id("turn"),
            labels=_check_labels(labels),
            messages=(new,) if target == meta.session_id else (*history, new),
            history_from=HistorySource(
                kind="fork",
                run_id=source_run_id,
                through=cut,
                exclude_reasoning=bool(exclude_reasoning),
            )
            if target == meta.session_id
            else None,
            copied_from=None  # [G2] a copy names its source
            if target == meta.session_id
            else CopiedFrom(session_id=meta.session_id, run_id=source_run_id, through=cut),
        )
        return await self._start(inp)

    async def fork(
        self,
        source_run_id: str,
        message: Message | str,
        through: str | None = None,
        session_id: str | None = None,
        **kwargs: Any,
    ) -> RunOutput:
        """Start a branch of a conversation and wait for it (see :meth:`start_fork`)."""
        handle = await self.start_fork(source_run_id, message, through, session_id, **kwargs)
        return await handle.wait()

    async def start_one_shot(
        self,
        messages: Sequence[Message] | str,
        turn_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Start a run that belongs to no session [L3]."""
        inp = RunInput(
            run_id=_check_id("run_id", run_id) or _new_id("run"),
            agent_id=self.agent_id,
            turn_id=_check_id("turn_id", turn_id) or _new_id("turn"),
            labels=_check_labels(labels),
            messages=_check_messages(messages),
        )
        return await self._start(inp)

    async def run_one_shot(
        self,
        messages: Sequence[Message] | str,
        turn_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> RunOutput:
        """Start a sessionless run and wait for it."""
        handle = await self.start_one_shot(messages, turn_id=turn_id, labels=labels, run_id=run_id)
        return await handle.wait()

    async def start_resume(
        self,
        session_id: str,
        previous_run_id: str,
        answer: Answer | str | ToolHappened | ToolRetry | ToolFailed,
        turn_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> RunHandle:
        """Start the continuation of the suspended run ``previous_run_id`` [K1]-[K3].

        The continuation seeds the predecessor's transcript and appends the
        answer; it keeps the predecessor's turn id and labels unless given.
        When a child run suspended the run, ``answer`` answers that child's
        question (``RunOutput.awaiting`` names the run that asked): the child
        is continued first, then this run. A run that waits for a decision on a
        tool call in doubt (``awaiting.kind == "in_doubt"``) takes ``ToolHappened``,
        ``ToolRetry`` or ``ToolFailed``, and nothing else does.
        """
        if not isinstance(previous_run_id, str) or not previous_run_id:
            raise ValidationError(
                field="previous_run_id", expected="a non-empty string", got=previous_run_id
            )
        if isinstance(answer, str):
            answer = Answer(text=answer)
        if isinstance(answer, (ToolHappened, ToolRetry, ToolFailed)):
            answer = Answer(decision=answer)
        if not isinstance(answer, Answer):
            raise ValidationError(
                field="answer",
                expected="an Answer, a str, or ToolHappened/ToolRetry/ToolFailed",
                got=answer,
            )
        decision = answer.decision
        if decision is not None and not isinstance(decision.by, str):
            raise ValidationError(field="answer.by", expected="a str", got=decision.by)
        if isinstance(decision, ToolFailed) and not isinstance(decision.reason, str):
            raise ValidationError(field="answer.reason", expected="a str", got=decision.reason)
        if isinstance(decision, ToolHappened):
            try:
                ToolResultPart(tool_use_id="-", content=decision.result)
            except TranscriptError as e:
                raise ValidationError(
                    field="answer.result", expected="plain JSON", got=decision.result
                ) from e
        for call_id, content in answer.tool_results.items():
            try:
                ToolResultPart(tool_use_id=call_id, content=content)
            except TranscriptError as e:
                raise ValidationError(
                    field=f"answer.tool_results[{call_id!r}]", expected="plain JSON", got=content
                ) from e
        store = self._runtime.store
        meta = await store.load_run(previous_run_id)
        if meta.status is not RunStatus.SUSPENDED:
            raise RunNotActiveError(
                run_id=previous_run_id, expected="suspended", got=meta.status.value
            )
        _check_answer(await _innermost_checkpoint(store, previous_run_id), answer)
        if not turn_id:
            first = await store.list_run_records(previous_run_id, limit=1)
            turn_id = first.records[0].turn_id if first.records else ""
        inp = RunInput(
            run_id=_check_id("run_id", run_id) or _new_id("run"),
            agent_id=self.agent_id,
            session_id=session_id or "",
            turn_id=turn_id or _new_id("turn"),
            labels=_check_labels(labels) if labels is not None else dict(meta.labels),
            predecessor_run_id=previous_run_id,
            answer=answer,
        )
        return await self._start(inp)

    async def resume(
        self,
        session_id: str,
        previous_run_id: str,
        answer: Answer | str | ToolHappened | ToolRetry | ToolFailed,
        **kwargs: Any,
    ) -> RunOutput:
        """Continue a suspended run with ``answer`` and wait for it (see :meth:`start_resume`)."""
        handle = await self.start_resume(session_id, previous_run_id, answer, **kwargs)
        return await handle.wait()

    def __repr__(self) -> str:
        return f"<AgentClient {self.agent_id}>"
