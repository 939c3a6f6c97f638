"""Conformance: a message while a run is busy, ordered in the store's transaction.

``submit_message`` keeps a message in its session's order with the turn it
follows and its fate (start, queued, interrupting, steering), or refuses it
(``reject`` while busy: ``SessionBusyError``, nothing stored). A root start
whose run id is a submitted message claims it in the start's transaction:
only the first waiting message, only when no turn of the session runs, only
following (by reference) the turn it was queued after.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from agentledger.errors import (
    RunConflictError,
    RunNotFoundError,
    SessionBusyError,
    SessionEndedError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import World
from agentledger.storage.lifecycle.messages import MESSAGE_STEERED
from agentledger.storage.types import (
    BusyPolicy,
    MessageFate,
    MessageSubmission,
    RootRunStart,
    RunStatus,
    SessionMessage,
)

__all__ = ["MessageConformance"]


def _message(text: str) -> bytes:
    return msgspec.json.encode({"role": "user", "parts": [{"type": "text", "text": text}]})


def submission(
    world: World,
    session: str,
    name: str,
    policy: BusyPolicy = BusyPolicy.QUEUE,
    *,
    after: str = "",
    at: datetime | None = None,
    text: str = "",
) -> MessageSubmission:
    """A message for ``session`` whose turn will be the run ``name``."""
    return MessageSubmission(
        session_id=session,
        run_id=world.track_run(name),
        turn_id=f"turn-{name}",
        agent_id="agent",
        message=_message(text or f"hello from {name}"),
        if_busy=policy,
        submitted_at=at or world.now(),
        after=after,
    )


def _reference(world: World, run: RecordBuilder, source: str, through: str) -> Any:
    body = payloads.TranscriptReference(kind="fork", run_id=source, through=through)
    return run.record(
        payloads.TRANSCRIPT_REFERENCED, body.encode(), event_key="transcript:referenced",
        at=world.now(),
    )  # fmt: skip


async def queued_start(world: World, message: SessionMessage) -> RootRunStart:
    """The start of ``message``'s turn: a reference to the turn it follows, if any."""
    run = RecordBuilder(
        world.run(message.run_id.removeprefix(f"{world.ns}-"), session=message.session_id).run,
        turn_id=message.turn_id,
    )
    records = []
    if message.after:
        try:
            through = (await world.store.load_run(message.after)).last_record_id
        except RunNotFoundError:  # the turn it follows has not started: a start refused
            through = "1"
        records.append(_reference(world, run, message.after, through))
    return replace(run.root_start(), records=tuple(records))


class MessageConformance(ConformanceBase):
    """Capability: messages submitted to a busy session, in one order, started once."""

    async def test_idle_session_message_may_start_and_retry_is_exact(self, world: World) -> None:
        sid = await world.session("s")
        sub = submission(world, sid, "m1")
        first = await world.store.submit_message(sub)
        assert (first.fate, first.position, first.after, first.started) == (
            MessageFate.START, 1, "", False
        )  # fmt: skip
        assert await world.store.submit_message(sub) == first
        with pytest.raises(RunConflictError):
            await world.store.submit_message(replace(sub, message=_message("other")))
        assert await world.store.load_pending_messages(sid) == [first]
        result = await world.store.start_root_run(await queued_start(world, first))
        assert result.started.inserted
        (started,) = await world.store.list_session_messages(sid)
        assert started.started
        assert await world.store.load_pending_messages(sid) == []
        assert await world.store.submit_message(sub) == started  # a retry after its start

    async def test_reject_while_busy_names_the_running_run_and_stores_nothing(
        self, world: World
    ) -> None:
        sid = await world.session("s")
        busy = await world.root("busy", session=sid)
        sub = submission(world, sid, "m1", BusyPolicy.REJECT)
        async with world.unchanged():
            with pytest.raises(SessionBusyError) as caught:
                await world.store.submit_message(sub)
        assert caught.value.run_id == busy.run.run_id
        assert caught.value.message_run_id == sub.run_id
        assert await world.store.list_session_messages(sid) == []

    async def test_queue_orders_messages_and_only_the_head_starts_after_the_run(
        self, world: World
    ) -> None:
        sid = await world.session("s")
        busy = await world.root("busy", session=sid)
        one = await world.store.submit_message(submission(world, sid, "m1"))
        two = await world.store.submit_message(submission(world, sid, "m2"))
        assert (one.fate, one.after, one.running_run_id) == (
            MessageFate.QUEUED, busy.run.run_id, busy.run.run_id
        )  # fmt: skip
        assert (two.fate, two.after, two.position) == (MessageFate.QUEUED, one.run_id, 2)
        with pytest.raises(SessionBusyError) as caught:  # the turn ahead still runs
            await world.store.start_root_run(await queued_start(world, one))
        assert caught.value.run_id == busy.run.run_id
        await world.finish(busy, RunStatus.FAILED)
        with pytest.raises(SessionBusyError) as caught:  # a message waits ahead of it
            await world.store.start_root_run(await queued_start(world, two))
        assert caught.value.run_id == one.run_id
        wrong = replace(await queued_start(world, one), records=())
        with pytest.raises(RunConflictError):  # not following the turn it was queued after
            await world.store.start_root_run(wrong)
        start = await queued_start(world, one)
        assert (await world.store.start_root_run(start)).started.inserted
        assert not (await world.store.start_root_run(start)).started.inserted  # exact retry
        assert [m.run_id for m in await world.store.load_pending_messages(sid)] == [two.run_id]

    async def test_interrupt_and_steer_fates(self, world: World) -> None:
        sid = await world.session("s")
        busy = await world.root("busy", session=sid)
        steer = await world.store.submit_message(submission(world, sid, "m1", BusyPolicy.STEER))
        assert (steer.fate, steer.after) == (MessageFate.STEERING, busy.run.run_id)
        stop = await world.store.submit_message(submission(world, sid, "m2", BusyPolicy.INTERRUPT))
        assert (stop.fate, stop.after, stop.running_run_id) == (
            MessageFate.INTERRUPTING, steer.run_id, busy.run.run_id
        )  # fmt: skip

    async def test_after_must_name_the_latest_turn_while_busy(self, world: World) -> None:
        sid = await world.session("s")
        old = await world.root("old", session=sid)
        await world.finish(old)
        await world.root("busy", session=sid)
        sub = submission(world, sid, "m", after=old.run.run_id)
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.submit_message(sub)

    async def test_bad_submissions_change_nothing(self, world: World) -> None:
        sid = await world.session("s")
        sub = submission(world, sid, "m")
        async with world.unchanged():
            for bad in (
                replace(sub, message=b"not json"),
                replace(sub, message=msgspec.json.encode({"role": "x"})),
                replace(sub, if_busy="sometimes"),
                replace(sub, run_id=""),
            ):
                with pytest.raises(ValidationError):
                    await world.store.submit_message(bad)
        taken = await world.root("taken", session=sid)
        with pytest.raises(RunConflictError):
            await world.store.submit_message(
                replace(submission(world, sid, "m"), run_id=taken.run.run_id)
            )

    async def test_ended_session_refuses_and_purge_takes_the_messages(self, world: World) -> None:
        sid = await world.session("s")
        busy = await world.root("busy", session=sid)
        waiting = await world.store.submit_message(submission(world, sid, "m1"))
        await world.finish(busy)
        await world.store.end_session(sid, ended_at=world.now())
        with pytest.raises(SessionEndedError):
            await world.store.submit_message(submission(world, sid, "m2"))
        receipt = await world.store.purge_session(sid)
        assert receipt.messages == 1
        with pytest.raises(SessionPurgedError):
            await world.store.submit_message(submission(world, sid, "m1"))
        with pytest.raises(SessionPurgedError):
            await world.store.start_root_run(
                replace(world.run("m1", session=sid).root_start(), records=())
            )
        assert waiting.run_id == world.id("m1")

    async def test_concurrent_messages_get_one_order(self, world: World, other_store: Any) -> None:
        """Messages at the same moment on two handles: positions 1..n, one starts at once,
        each of the others follows exactly one other (a single chain)."""
        sid = await world.session("s")
        at = world.now()
        subs = [submission(world, sid, f"m{i}", at=at) for i in range(self.race_writers)]
        stores = [world.store, other_store]
        results = await race([stores[i % 2].submit_message(sub) for i, sub in enumerate(subs)])
        wins, losses = split(results, SessionMessage)
        assert not losses, losses
        stored = await world.store.list_session_messages(sid)
        assert [m.position for m in stored] == list(range(1, len(subs) + 1))
        assert [m.fate for m in stored] == [MessageFate.START] + [MessageFate.QUEUED] * (
            len(subs) - 1
        )
        assert [m.after for m in stored[1:]] == [m.run_id for m in stored[:-1]]
        assert sorted(m.run_id for m in stored) == sorted(s.run_id for s in subs)
        # Every handle's answer is what the store kept.
        assert sorted((m for _, m in wins), key=lambda m: m.position) == stored
        # The turns start in that order, each once, however many try.
        for message in stored:
            start = await queued_start(world, message)
            tries = await race([stores[i % 2].start_root_run(start) for i in range(4)])
            assert sum(r.started.inserted for r in tries if not isinstance(r, BaseException)) == 1
            assert all(not isinstance(r, BaseException) for r in tries), tries
            run = RecordBuilder(start.run, turn_id=message.turn_id)
            await world.store.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=world.now()))
        assert await world.store.load_pending_messages(sid) == []

    async def test_a_turn_takes_its_steering_messages_once(self, world: World) -> None:
        sid = await world.session("s")
        busy = await world.root("busy", session=sid)
        one = await world.store.submit_message(submission(world, sid, "m1", BusyPolicy.STEER))
        two = await world.store.submit_message(submission(world, sid, "m2", BusyPolicy.STEER))
        later = await world.store.submit_message(submission(world, sid, "m3"))
        assert (two.fate, two.after) == (MessageFate.STEERING, one.run_id)
        assert (later.fate, later.after) == (MessageFate.QUEUED, two.run_id)
        note = busy.record("note", b"{}", event_key="turn:2:phase", at=world.now())
        done = await world.store.append_turn_records([note])
        assert [r.inserted for r in done.results] == [True]
        assert [(m.run_id, m.fate, m.started) for m in done.steered] == [
            (one.run_id, MessageFate.STEERED, True), (two.run_id, MessageFate.STEERED, True)
        ]  # fmt: skip
        assert len(done.steered_records) == 4
        page = await world.store.list_run_records(busy.run.run_id)
        tail = [(r.type, r.event_key) for r in page.records][-5:]
        assert tail == [
            ("note", "turn:2:phase"),
            (payloads.TRANSCRIPT_APPENDED, f"steer:{one.run_id}:messages"),
            (MESSAGE_STEERED, f"steer:{one.run_id}"),
            (payloads.TRANSCRIPT_APPENDED, f"steer:{two.run_id}:messages"),
            (MESSAGE_STEERED, f"steer:{two.run_id}"),
        ]
        assert [r.id for r in page.records][-4:] == [r.id for r in done.steered_records]
        # the queued message now follows the run; the steered ones wait no more
        (waiting,) = await world.store.load_pending_messages(sid)
        assert (waiting.run_id, waiting.after) == (later.run_id, busy.run.run_id)
        again = await world.store.append_turn_records([note])  # an exact retry takes nothing
        assert (again.steered, [r.inserted for r in again.results]) == ([], [False])
        await world.finish(busy)
        for taken in (one, two):  # never started as a turn of its own
            with pytest.raises(RunConflictError):
                await world.store.start_root_run(await queued_start(world, taken))
        assert (await world.store.start_root_run(await queued_start(world, waiting))).started
        assert await world.store.load_pending_messages(sid) == []

    async def test_a_steer_is_taken_by_its_run_or_starts_its_turn_never_both(
        self, world: World, other_store: Any
    ) -> None:
        """The run's planner turn races the run's end: then the message's start. Exactly
        one of them has it, whichever order the store gave them."""
        for i in range(self.race_writers):
            sid = await world.session(f"s{i}")
            busy = await world.root(f"busy{i}", session=sid)
            steer = submission(world, sid, f"m{i}", BusyPolicy.STEER)
            message = await world.store.submit_message(steer)
            note = busy.record("note", b"{}", event_key="turn:2:phase", at=world.now())
            took, _ = await race(
                [
                    world.store.append_turn_records([note]),
                    other_store.record_run_terminal(
                        busy.terminal(RunStatus.COMPLETED, at=world.now())
                    ),
                ]
            )
            taken = not isinstance(took, BaseException) and bool(took.steered)
            try:
                started = await world.store.start_root_run(await queued_start(world, message))
                began = started.started.inserted
            except RunConflictError:
                began = False
            assert taken != began, (took, began)
            (stored,) = [
                m for m in await world.store.list_session_messages(sid) if m.run_id == steer.run_id
            ]
            assert stored.fate is (MessageFate.STEERED if taken else MessageFate.STEERING)
            assert stored.started
