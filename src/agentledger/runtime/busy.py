"""A message while the agent works: the runtime side of the store's message order.

``client.run(session_id, message, if_busy=...)`` hands the message to the
store (``submit_message``), which decides, in its transaction, where the
message stands: its turn may start at once, or it waits for the turn ahead of
it (queued), or it waits for the running run it cancels (interrupting), or it
is meant for the running run (steering). The store refuses a ``reject`` while
busy with ``SessionBusyError``.

A steering message is taken by the running run at its next planner turn: the
turn's first write (``append_turn_records``) appends the turn's owed records
and, in the same transaction, the message as a user message with its
provenance, and marks it ``steered``, so it joins the run exactly once and
never starts a turn of its own; its handle waits for that run's output. If the
run ends before a planner turn took it, it is still waiting, and becomes the
next turn like a queued message.

A waiting message is started by whichever runtime sees the turn ahead of it
end: the runtime that submitted it follows that turn, and a runtime that
repairs a run (``ensure_run_completion``) or opens a session's queue
(``Runtime.start_queued``) starts what is due. Its start claims it in the
store's transaction (only the first waiting message, only when no turn of the
session runs), and carries this runtime's claim, so of two runtimes starting
it, exactly one wins; the other's workflow is refused before it writes anything.
On Temporal the queue does not depend on any of them: when a root run's
workflow ends, the worker starts what is then due (see
:mod:`agentledger.engine.temporal.queue`), with the same decision
(:func:`due_turn`); a start of a workflow id Temporal already has is refused
there, and the runtime that lost follows the winner's workflow.

The new turn follows the turn ahead of it by reference: the whole transcript
of a completed turn; of a failed, canceled or suspended one, the transcript
through its last record after which a user message may follow (so no tool use
is left without its result).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence, Set
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from agentledger.errors import (
    AgentledgerError,
    RunCancellationConflictError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    SessionBusyError,
    TranscriptError,
    ValidationError,
)
from agentledger.runtime.events import MessageSubmitted
from agentledger.runtime.records import RecordSpec
from agentledger.runtime.wire import HistorySource, RunInput, RunOutput
from agentledger.storage import payloads
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.types import (
    BusyPolicy,
    MessageFate,
    MessageSubmission,
    RunMeta,
    RunStatus,
    SessionMessage,
)
from agentledger.transcript import (
    Message,
    decode_message,
    encode_message,
    validate_planner_transcript,
)

if TYPE_CHECKING:
    from agentledger.engine.base import Engine
    from agentledger.runtime.runtime import Runtime

__all__ = [
    "MESSAGE_CLAIMED",
    "BusyTurns",
    "DueTurn",
    "QueuedRunHandle",
    "check_policy",
    "claim_spec",
    "due_turn",
    "interruption_reason",
    "start_turn",
]

MESSAGE_CLAIMED = "session_message_claimed"
"""The record a queued turn's start carries: which runtime started it (its claim)."""

_TRANSCRIPT_TYPES = frozenset(
    {payloads.TRANSCRIPT_APPENDED, payloads.TRANSCRIPT_SEEDED, payloads.TRANSCRIPT_REFERENCED}
)
_POLL_FIRST = 0.01
_POLL_MOST = 0.5


def check_policy(value: object, field: str = "if_busy") -> BusyPolicy:
    """A busy policy by name.

    Raises:
        ValidationError: not one of reject, queue, interrupt, steer.
    """
    try:
        return BusyPolicy(value if isinstance(value, str) else "")
    except ValueError:
        expected = "one of " + ", ".join(repr(p.value) for p in BusyPolicy)
        raise ValidationError(field=field, expected=expected, got=value) from None


def claim_spec(claim: str) -> RecordSpec:
    """The record that says which runtime started a queued turn (a start retried by the
    same runtime repeats it; another runtime's start differs, and the store refuses it)."""
    body = b'{"claim":"' + claim.encode() + b'"}'
    return RecordSpec(type=MESSAGE_CLAIMED, event_key="session_message:claimed", payload=body)


def interruption_reason(message_run_id: str) -> str:
    """The cancellation reason of a run an ``interrupt`` message stops: it names the message."""
    return f"interrupted by message {message_run_id}"


def _now_ms() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


class QueuedRunHandle:
    """A message's turn: ``message`` says where it stood; wait for its output or cancel it."""

    def __init__(self, busy: BusyTurns, message: SessionMessage) -> None:
        self._busy = busy
        self.message = message
        """The message as the store kept it (its position, fate and the turn it follows)."""
        self.run_id = message.run_id
        """The run id of the message's turn (also its workflow id)."""

    async def wait(self) -> RunOutput:
        """Wait for the turn to start (after the turns ahead of it) and to end. A turn
        another runtime started (it saw the turn ahead end first) is followed in the store.
        A steering message the running run took answers with that run's output.

        Raises:
            AgentledgerError: as ``RunHandle.wait``.
        """
        busy, run_id = self._busy, self.run_id
        if self.message.fate is MessageFate.STEERING and run_id not in busy._launched:
            taken = await _steered_into(busy.runtime, self.message)
            if taken is not None:
                return taken
        try:
            return await self._wait()
        finally:
            waiter = busy._waiters.get(run_id)
            if waiter is not None and (waiter.done() or run_id not in busy._launched):
                del busy._waiters[run_id]  # nothing left to tell about its start

    async def _wait(self) -> RunOutput:
        from agentledger.runtime.client import RunHandle

        busy, run_id = self._busy, self.run_id
        waiter = busy._waiter(run_id)
        delay = _POLL_FIRST
        while not waiter.done():
            if run_id not in busy._launched and await _exists(busy.runtime, run_id):
                return await _output_from_store(busy.runtime, self.message)
            await asyncio.wait({waiter}, timeout=delay)
            delay = min(delay * 2, _POLL_MOST)
        await waiter
        try:
            return await RunHandle(busy.runtime, run_id).wait()
        except (RunConflictError, SessionBusyError):
            if not await _claimed_elsewhere(busy, run_id):
                raise
            return await _output_from_store(busy.runtime, self.message)

    async def cancel(self, reason: str) -> None:
        """Cancel the run that answers the message, once there is one [C1]: its own turn
        when it starts (here or in another runtime), or the running run a steering
        message joined.

        Raises:
            RunNotActiveError: that run has already ended.
        """
        runtime = self._busy.runtime
        delay = _POLL_FIRST
        while True:
            if await _exists(runtime, self.run_id):
                break
            stored = await _stored(runtime, self.message)
            if stored.fate is MessageFate.STEERED:  # it joined that run: stop that run
                await runtime.cancel_run(stored.running_run_id, reason)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MOST)
        await runtime.cancel_run(self.run_id, reason)

    def __repr__(self) -> str:
        return f"<QueuedRunHandle {self.run_id} {self.message.fate.value}>"


class BusyTurns:
    """The messages of sessions this runtime submits, follows and starts."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.claim = uuid.uuid4().hex
        """This runtime's claim, carried by each queued turn it starts."""
        self._launched: set[str] = set()
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}
        self._followed: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------- submitting

    async def submit(
        self,
        agent_id: str,
        session_id: str,
        message: Message,
        *,
        policy: BusyPolicy,
        after: str,
        turn_id: str,
        run_id: str,
        labels: Mapping[str, str],
    ) -> QueuedRunHandle:
        """Store the message in its session's order, act on its fate, return its turn."""
        sub = MessageSubmission(
            session_id=session_id,
            run_id=run_id,
            turn_id=turn_id,
            agent_id=agent_id,
            message=encode_message(message),
            if_busy=policy,
            submitted_at=_now_ms(),
            after=after,
            labels=dict(labels),
        )
        stored = await self.runtime.store.submit_message(sub)
        await self._announce(stored)
        if stored.fate is MessageFate.INTERRUPTING:
            await self._interrupt(stored)
        await self.start_due(session_id)
        return QueuedRunHandle(self, stored)

    async def _announce(self, message: SessionMessage) -> None:
        stream = self.runtime.stream
        if stream is None:
            return
        await stream.send(
            MessageSubmitted(
                key=f"{message.run_id}/session_message:submitted",
                run_id=message.run_id,
                agent_id=message.agent_id,
                session_id=message.session_id,
                turn_id=message.turn_id,
                timestamp=message.submitted_at,
                position=message.position,
                fate=message.fate.value,
                if_busy=message.if_busy.value,
                after=message.after,
                running_run_id=message.running_run_id,
            )
        )

    async def _interrupt(self, message: SessionMessage) -> None:
        """[C1] cancel the run the message interrupts, naming the message."""
        with contextlib.suppress(RunNotActiveError, RunCancellationConflictError):
            await self.runtime.cancel_run(
                message.running_run_id, interruption_reason(message.run_id)
            )

    # --------------------------------------------------------------- starting

    async def start_due(self, session_id: str) -> list[str]:
        """Start the session's first waiting message if the turn ahead of it has ended;
        else follow that turn, to start it then. Returns the run ids started here."""
        async with self._session_lock(session_id):
            due = await due_turn(self.runtime, session_id, self.claim, skip=self._launched)
            if due is None:
                return []
            head = due.head
            if due.running is not None:
                if head.fate is MessageFate.INTERRUPTING and not due.running.cancellation_reason:
                    await self._interrupt(head)  # its submitter stopped before it could
                self.follow(session_id, due.running.run_id)
                return []
            if due.start is None:
                return []  # another runtime serves this agent
            self._launched.add(head.run_id)
            waiter = self._waiter(head.run_id)
            self.runtime._close_registration()
            try:
                here = await start_turn(self.runtime.engine, due.start)
            except BaseException as e:
                if not waiter.done():
                    waiter.set_exception(e)
                raise
            if not waiter.done():
                waiter.set_result(None)  # its workflow runs (whoever started it): follow it
            self.follow(session_id, head.run_id)
            return [head.run_id] if here else []

    @contextlib.asynccontextmanager
    async def _session_lock(self, session_id: str) -> AsyncIterator[None]:
        """The session's lock in this runtime, kept only while someone holds or awaits it."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        self._lock_users[session_id] = self._lock_users.get(session_id, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[session_id] -= 1
            if not self._lock_users[session_id]:
                del self._lock_users[session_id]
                del self._locks[session_id]

    def _waiter(self, run_id: str) -> asyncio.Future[None]:
        if run_id not in self._waiters:
            self._waiters[run_id] = asyncio.get_running_loop().create_future()
        return self._waiters[run_id]

    async def started(self, run_id: str) -> None:
        """Wait until this runtime has started ``run_id``'s turn."""
        await asyncio.shield(self._waiter(run_id))

    def follow(self, session_id: str, run_id: str) -> None:
        """When ``run_id`` ends, start what is then due in its session (once per run)."""
        if run_id in self._followed:
            return
        self._followed.add(run_id)
        task = asyncio.get_running_loop().create_task(self._after(session_id, run_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after(self, session_id: str, run_id: str) -> None:
        try:
            with contextlib.suppress(AgentledgerError):  # its messages wait for another runtime
                await _ended(self.runtime, run_id)
                await self.start_due(session_id)
        finally:
            self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        """Drop what this runtime kept about ``run_id``'s turn once it has ended, so the
        bookkeeping is bounded by the turns still going (a late ``wait`` reads the store)."""
        self._followed.discard(run_id)
        self._launched.discard(run_id)
        waiter = self._waiters.get(run_id)
        if waiter is not None and waiter.done():
            del self._waiters[run_id]

    async def close(self) -> None:
        """Stop following runs (their messages wait in the store for another runtime)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


class DueTurn(NamedTuple):
    """What a session's first waiting message needs (see :func:`due_turn`)."""

    head: SessionMessage
    """The first waiting message."""
    running: RunMeta | None
    """The turn ahead of it, while it still runs (the message waits for its end)."""
    start: RunInput | None
    """The input that starts the message's turn now (None: it waits, or this runtime
    does not serve its agent)."""


async def due_turn(
    runtime: Runtime, session_id: str, claim: str, *, skip: Set[str] = frozenset()
) -> DueTurn | None:
    """The session's first waiting message and whether its turn may start now: the one
    decision every starter of a queued turn makes (a runtime following the turn ahead,
    ``start_queued``, repair, and the Temporal worker when a run's workflow ends). Its
    start carries ``claim``. None when nothing waits, or the head is in ``skip`` (this
    runtime started it already; its start claims it)."""
    pending = await runtime.store.load_pending_messages(session_id)
    if not pending or pending[0].run_id in skip:
        return None
    head = pending[0]
    meta = None
    if head.after:
        meta = await runtime.store.load_run(head.after)
        if meta.status is RunStatus.RUNNING:
            return DueTurn(head=head, running=meta, start=None)
    if not runtime._registry.has_agent(head.agent_id):
        return DueTurn(head=head, running=None, start=None)
    history = await _history(runtime, head, meta)
    inp = RunInput(
        run_id=head.run_id,
        agent_id=head.agent_id,
        session_id=session_id,
        turn_id=head.turn_id,
        labels=dict(head.labels),
        messages=(decode_message(head.message),),
        history_from=history,
        claim=claim,
    )
    return DueTurn(head=head, running=None, start=inp)


async def start_turn(engine: Engine, inp: RunInput) -> bool:
    """Start a waiting message's turn on ``engine``; False when the engine already has
    a workflow of that run id (another starter won: on Temporal the workflow id is the
    run id, so of two starts exactly one is accepted)."""
    try:
        await engine.start(inp.run_id, inp)
    except ValidationError:
        if await engine.describe(inp.run_id) is None:
            raise
        return False
    return True


async def _ended(runtime: Runtime, run_id: str) -> None:
    """Wait until ``run_id`` is no longer running in the store."""
    if await runtime.engine.describe(run_id) is not None:
        with contextlib.suppress(Exception):  # how it ended is the store's to say
            await runtime.engine.result(run_id)
    delay = _POLL_FIRST
    while (await runtime.store.load_run(run_id)).status is RunStatus.RUNNING:
        await asyncio.sleep(delay)  # a run of another process: its store row says when
        delay = min(delay * 2, _POLL_MOST)


async def _steered_into(runtime: Runtime, message: SessionMessage) -> RunOutput | None:
    """The output of the run a steering message joined, once it has ended; None when
    the run ended without taking it (then it is a turn of its own)."""
    await _ended(runtime, message.running_run_id)
    for stored in await runtime.store.list_session_messages(message.session_id):
        if stored.run_id == message.run_id and stored.fate is MessageFate.STEERED:
            page = await runtime.store.list_run_records(message.running_run_id, limit=1)
            turn_id = page.records[0].turn_id if page.records else message.turn_id
            joined = msgspec.structs.replace(
                message, run_id=message.running_run_id, turn_id=turn_id
            )
            return await _output_from_store(runtime, joined)
    return None


async def _stored(runtime: Runtime, message: SessionMessage) -> SessionMessage:
    """The message as the store holds it now (its fate may have moved on)."""
    for stored in await runtime.store.list_session_messages(message.session_id):
        if stored.run_id == message.run_id:
            return stored
    raise RunNotFoundError(run_id=message.run_id)


async def _exists(runtime: Runtime, run_id: str) -> bool:
    try:
        await runtime.store.load_run(run_id)
    except RunNotFoundError:
        return False
    return True


async def _claimed_elsewhere(busy: BusyTurns, run_id: str) -> bool:
    """Whether ``run_id`` was started by another runtime's claim (this one's start lost)."""
    if not await _exists(busy.runtime, run_id):
        return False
    page = await busy.runtime.store.list_run_records(run_id, limit=8)
    claims = [r.payload for r in page.records if r.type == MESSAGE_CLAIMED]
    return bool(claims) and claims[0] != claim_spec(busy.claim).payload


async def _output_from_store(runtime: Runtime, message: SessionMessage) -> RunOutput:
    """How a turn another runtime ran ended, read from the store once it has."""
    run_id = message.run_id
    await _ended(runtime, run_id)
    meta = await runtime.store.load_run(run_id)
    final = None
    failure = None
    if meta.status is RunStatus.COMPLETED:
        transcript = await build_messages_from_run_log(runtime.store, run_id, full=True)
        if transcript and transcript[-1].role == "assistant":
            final = transcript[-1]
    last = await _last_record(runtime, run_id)
    if last is not None and last.type == payloads.RUN_COMPLETED:
        failure = payloads.RunCompleted.decode(last.payload).failure
    return RunOutput(
        run_id=run_id,
        agent_id=meta.agent_id,
        session_id=meta.session_id,
        turn_id=message.turn_id,
        status=meta.status,
        final=final,
        failure=failure,
        cancellation_reason=meta.cancellation_reason,
        finished_at=meta.updated_at,
    )


async def _last_record(runtime: Runtime, run_id: str) -> Any:
    cursor, last = "", None
    while True:
        page = await runtime.store.list_run_records(run_id, cursor=cursor)
        if page.records:
            last = page.records[-1]
        cursor = page.next_cursor
        if not cursor:
            return last


async def _history(runtime: Runtime, head: SessionMessage, meta: RunMeta | None) -> Any:
    """The reference the head's turn starts from: the turn it follows."""
    if meta is None:
        return None
    if meta.status is RunStatus.COMPLETED:
        return HistorySource(kind="next_turn", run_id=meta.run_id, through=meta.last_record_id)
    new = decode_message(head.message)
    through = await _last_complete(runtime, meta, new)
    return HistorySource(kind="fork", run_id=meta.run_id, through=through)


async def _last_complete(runtime: Runtime, meta: RunMeta, new: Message) -> str:
    """The newest record of a run that did not complete after which ``new`` may follow:
    not between a tool call and its result."""
    store = runtime.store
    ids: list[str] = []
    cursor = ""
    while True:
        page = await store.list_run_records(meta.run_id, cursor=cursor)
        ids.extend(r.id for r in page.records if r.type in _TRANSCRIPT_TYPES)
        cursor = page.next_cursor
        if not cursor:
            break
    for cut in reversed(ids):
        history = await build_messages_from_run_log(store, meta.run_id, through=cut, full=True)
        with contextlib.suppress(TranscriptError, ValidationError):
            validate_planner_transcript((*history, new))
            return cut
    return "1"  # nothing of its own fits: only its start (the history before it, if any)


def one_message(messages: Sequence[Message] | str) -> Message:
    """The one user message a busy-policy call sends (its history comes by reference)."""
    from agentledger.transcript import TextPart

    if isinstance(messages, str):
        return Message(role="user", parts=(TextPart(text=messages),))
    items = list(messages)
    if len(items) != 1 or not isinstance(items[0], Message) or items[0].role != "user":
        raise ValidationError(
            field="messages",
            expected="one user message (with if_busy, the history comes from the session)",
            got=f"{len(items)} messages",
        )
    return items[0]
