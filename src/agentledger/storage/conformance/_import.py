"""Conformance: importing a whole ended session verbatim, the restore path [A1].

An image read from one session, with its namespace renamed to ids this store
never saw (a byte-for-byte rename inside the msgpack encoding, payloads and
checkpoints included), is a session exported from another store. Importing it
must recreate exactly what the public API showed of the original, and every
refused import must change nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import msgspec
import pytest

from agentledger.errors import (
    AgentledgerError,
    CorruptRecordError,
    RunConflictError,
    RunNotActiveError,
    RunNotFoundError,
    SessionActiveError,
    SessionConflictError,
    SessionNotFoundError,
    SessionPurgedError,
)
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._messages import queued_start, submission
from agentledger.storage.conformance._world import AdminStore, World, all_sessions, dump_store
from agentledger.storage.session_image import (
    SessionImage,
    read_session_image,
    session_digest,
)
from agentledger.storage.types import (
    BusyPolicy,
    Checkpoint,
    MessageFate,
    Record,
    RunStatus,
    SessionMessage,
    SessionStatus,
    StartOutcome,
)

__all__ = ["ImportConformance", "ImportMessageConformance", "ImportReferenceConformance"]


async def _exported(world: World) -> SessionImage:
    """An ended session with a suspended root and its continuation, a child, a failed run,
    a [C2] stop after the end and a checkpoint: everything an image can carry."""
    sid = await world.session("src", labels={"tenant": "acme", "tier": "gold"})
    root = await world.root("root", session=sid, labels={"v": "1"})
    child, _ = await world.child("child", parent=root)
    await world.store.append_run_records(
        [world.note(child, f"n{i}", b'{"i":%d,"s":"\\u00e9"}' % i) for i in range(3)]
    )
    await world.finish(child)
    await world.store.append_run_record(world.note(root, "mine"))
    await world.store.record_run_suspension(
        root.suspension(Checkpoint(id="cp-1", data=b"\x00\xffsecret"), at=world.now())
    )
    successor = await world.root("next", session=sid, predecessor=root.run.run_id)
    await world.store.append_run_record(world.note(successor, "after"))
    await world.finish(successor)
    failed = await world.root("failed", session=sid)
    await world.finish(failed, RunStatus.FAILED)
    await world.store.end_session(sid, ended_at=world.now())
    stopped = world.run("stopped", session=sid)
    assert (await world.store.start_root_run(stopped.root_start())).outcome is StartOutcome.STOP
    return await read_session_image(world.store, sid)


def _renamed(value: Any, old: str, new: str, into: type[Any]) -> Any:
    """``value`` with the namespace ``old`` replaced by ``new`` (same length) in every byte."""
    assert len(old) == len(new)
    encoded = msgspec.msgpack.encode(value).replace(old.encode(), new.encode())
    return msgspec.msgpack.decode(encoded, type=into)


def _fresh_ns(world: World) -> str:
    return uuid.uuid4().hex[: len(world.ns)]


def _ids(image: SessionImage) -> tuple[list[str], list[str]]:
    return [image.session.id], [run.run_id for run in image.runs]


class ImportConformance(ConformanceBase):
    """Capability: ``import_session`` writes an ended session verbatim, or nothing."""

    async def test_import_recreates_the_session_exactly(self, world: World) -> None:
        """[A1] an imported session dumps equal to the one exported, byte for byte."""
        image = await _exported(world)
        before = await world.dump()
        ns = _fresh_ns(world)
        copy = _renamed(image, world.ns, ns, SessionImage)
        await world.store.import_session(copy)
        after = await dump_store(world.store, *_ids(copy))
        assert msgspec.msgpack.encode(after) == msgspec.msgpack.encode(
            _renamed(before, world.ns, ns, Any)
        )
        again = await read_session_image(world.store, copy.session.id)
        assert again == copy
        assert session_digest(again) == session_digest(copy)
        # [D6] listed under its labels and status, like the original, until purged.
        wanted, labels = [SessionStatus.ENDED], {"tenant": "acme", "tier": "gold"}
        listed = {s.id for s in await all_sessions(world.store, wanted, labels)}
        assert {image.session.id, copy.session.id} <= listed
        assert (await world.store.purge_session(copy.session.id)).digest == session_digest(copy)
        listed = {s.id for s in await all_sessions(world.store, wanted, labels)}
        assert image.session.id in listed
        assert copy.session.id not in listed

    async def test_an_imported_run_keeps_its_lifecycle(self, world: World) -> None:
        """[A1] imported runs are ended: writes to them are refused as on the original."""
        image = await _exported(world)
        copy = _renamed(image, world.ns, _fresh_ns(world), SessionImage)
        await world.store.import_session(copy)
        child = next(run for run in copy.runs if run.run_id.endswith("-child"))
        note = next(r for r in copy.records if r.run_id == child.run_id and r.event_key == "n0")
        unsaved = msgspec.structs.replace(note, id="", event_key="late")
        with pytest.raises(RunNotActiveError):
            await world.store.append_run_record(unsaved)
        retry = await world.store.append_run_record(msgspec.structs.replace(note, id=""))
        assert (retry.id, retry.inserted) == (note.id, False)  # an exact retry, as before

    async def test_import_refusals_change_nothing(self, world: World) -> None:
        """[A1] every refused import leaves the store as it was; a good one then succeeds."""
        image = await _exported(world)
        copy = _renamed(image, world.ns, _fresh_ns(world), SessionImage)
        sid = copy.session.id
        runs = copy.runs
        suspended = next(run for run in runs if run.status is RunStatus.SUSPENDED)
        completed = next(run for run in runs if run.status is RunStatus.COMPLETED)
        middle = next(r for r in copy.records if r.id == "2" and r.run_id == completed.run_id)
        cases: list[tuple[type[AgentledgerError], SessionImage]] = [
            (SessionConflictError, image),  # the original is still here
            (SessionActiveError, msgspec.structs.replace(
                copy, session=msgspec.structs.replace(
                    copy.session, status="active", ended_at=None))),
            (CorruptRecordError, msgspec.structs.replace(copy, runs=runs[:-1])),
            (CorruptRecordError, msgspec.structs.replace(
                copy, records=[r for r in copy.records if r is not middle])),
            (CorruptRecordError, msgspec.structs.replace(copy, runs=[
                msgspec.structs.replace(run, status=RunStatus.FAILED)
                if run is completed else run for run in runs])),
            (CorruptRecordError, msgspec.structs.replace(copy, checkpoints={})),
            (CorruptRecordError, msgspec.structs.replace(copy, checkpoints={
                **copy.checkpoints, completed.run_id: Checkpoint(id="x", data=b"x")})),
        ]  # fmt: skip
        taken = _renamed(image, image.session.id, sid, SessionImage)  # new session, old run ids
        cases.append((RunConflictError, taken))
        tracked = World(world.store, namespace=world.ns)
        tracked.session_ids = [*world.session_ids, sid]
        tracked.run_ids = [*world.run_ids, *(run.run_id for run in runs)]
        for error, bad in cases:
            async with tracked.unchanged():
                with pytest.raises(error) as caught:
                    await world.store.import_session(bad)
            assert bad.session.id in str(caught.value) or any(
                run.run_id in str(caught.value) for run in [*copy.runs, *image.runs]
            ), caught.value
        with pytest.raises(SessionNotFoundError):
            await world.store.load_session(sid)
        with pytest.raises(RunNotFoundError):
            await world.store.load_run(suspended.run_id)
        await world.store.import_session(copy)
        assert await read_session_image(world.store, sid) == copy

    async def test_import_of_a_purged_id_is_refused(self, world: World) -> None:
        """[A1] a purged session id stays a tombstone: its image cannot come back."""
        image = await _exported(world)
        await world.store.purge_session(image.session.id)
        async with world.unchanged():
            with pytest.raises(SessionPurgedError) as caught:
                await world.store.import_session(image)
        assert caught.value.session_id == image.session.id

    async def test_race_imports_of_one_image(self, world: World, other_store: AdminStore) -> None:
        """[A1] two imports of the same image at once: exactly one writes it."""
        image = await _exported(world)
        copy = _renamed(image, world.ns, _fresh_ns(world), SessionImage)
        results = await asyncio.gather(
            world.store.import_session(copy),
            other_store.import_session(copy),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1, results
        assert isinstance(errors[0], SessionConflictError | RunConflictError), errors[0]
        assert await read_session_image(other_store, copy.session.id) == copy


async def _referencing(world: World) -> SessionImage:
    """An ended session whose second turn's history references the first turn."""
    sid = await world.session("refs")
    first = await world.root("turn-1", session=sid)
    await world.store.append_run_record(world.note(first, "said"))
    await world.finish(first)  # ids 1..3
    second = world.run("turn-2", session=sid)
    reference = payloads.TranscriptReference(kind="next_turn", run_id=first.run.run_id, through="3")
    cmd = second.root_start()
    carried = second.record(
        payloads.TRANSCRIPT_REFERENCED,
        reference.encode(),
        event_key="transcript:referenced",
        at=world.now(),
    )
    await world.store.start_root_run(msgspec.structs.replace(cmd, records=(carried,)))
    await world.finish(second)
    await world.store.end_session(sid, ended_at=world.now())
    return await read_session_image(world.store, sid)


def _with_reference(image: SessionImage, **changes: str) -> tuple[SessionImage, Record]:
    """``image`` with its history reference's payload changed; the changed record."""
    at = next(i for i, r in enumerate(image.records) if r.type == payloads.TRANSCRIPT_REFERENCED)
    record = image.records[at]
    reference = msgspec.structs.replace(
        payloads.TranscriptReference.decode(record.payload), **changes
    )
    changed = msgspec.structs.replace(record, payload=reference.encode())
    records = [*image.records[:at], changed, *image.records[at + 1 :]]
    return msgspec.structs.replace(image, records=records), changed


def _twice_referenced(image: SessionImage) -> tuple[SessionImage, Record]:
    """``image`` with its referencing run holding a second reference before its end."""
    at = next(i for i, r in enumerate(image.records) if r.type == payloads.TRANSCRIPT_REFERENCED)
    first = image.records[at]
    log = [r for r in image.records if r.run_id == first.run_id]
    again = msgspec.structs.replace(first, id=str(len(log)), event_key="referenced:again")
    last = msgspec.structs.replace(log[-1], id=str(len(log) + 1))
    records = [r for r in image.records if r.run_id != first.run_id]
    return msgspec.structs.replace(image, records=[*records, *log[:-1], again, last]), again


class ImportReferenceConformance(ConformanceBase):
    """Capability: an imported history reference stays inside the image, or nothing is."""

    async def test_import_refuses_a_reference_that_leaves_the_image(self, world: World) -> None:
        """A reference to no run, another session's run, a later run or a record past the
        source's end: refused whole, naming the run and the record, writing nothing."""
        image = await _referencing(world)
        copy = _renamed(image, world.ns, _fresh_ns(world), SessionImage)
        first, second = (run.run_id for run in copy.runs)
        outside = await world.root("outside", session=await world.session("elsewhere"))
        cases = {
            "no such run": _with_reference(copy, run_id=f"{first}-missing"),
            "another session's run": _with_reference(copy, run_id=outside.run.run_id),
            "the original's run": _with_reference(copy, run_id=image.runs[0].run_id),
            "itself": _with_reference(copy, run_id=second),
            "past the source's end": _with_reference(copy, through="4"),
            "far past it": _with_reference(copy, through="999"),
            "a continuation of a completed run": _with_reference(copy, kind="continuation"),
            "a second reference": _twice_referenced(copy),
        }
        tracked = World(world.store, namespace=world.ns)
        tracked.session_ids = [*world.session_ids, copy.session.id]
        tracked.run_ids = [*world.run_ids, first, second]
        for name, (bad, reference) in cases.items():
            async with tracked.unchanged():
                with pytest.raises(CorruptRecordError) as caught:
                    await world.store.import_session(bad)
            assert (caught.value.run_id, caught.value.record_id) == (
                second,
                reference.id,
            ), name
        with pytest.raises(SessionNotFoundError):
            await world.store.load_session(copy.session.id)
        await world.store.import_session(copy)  # the reference as exported is fine
        assert await read_session_image(world.store, copy.session.id) == copy


async def messaged_session(world: World, name: str = "msgs") -> str:
    """An ended session whose messages were queued and interrupting: one started (its turn
    ran after the busy one), two still waiting when the session ended."""
    sid = await world.session(name, labels={"tenant": "acme"})
    busy = await world.root(f"{name}-busy", session=sid)
    await world.store.append_run_record(world.note(busy, "said"))
    first = await world.store.submit_message(submission(world, sid, f"{name}-m1"))
    await world.finish(busy)
    start = await queued_start(world, first)
    await world.store.start_root_run(start)
    turn = RecordBuilder(start.run, turn_id=first.turn_id)
    waiting = await world.store.submit_message(
        submission(world, sid, f"{name}-m2", BusyPolicy.INTERRUPT, text="stop, caf\u00e9")
    )
    await world.store.submit_message(submission(world, sid, f"{name}-m3"))
    await world.store.record_run_terminal(turn.terminal(RunStatus.COMPLETED, at=world.now()))
    assert waiting.fate is MessageFate.INTERRUPTING
    await world.store.end_session(sid, ended_at=world.now())
    return sid


class ImportMessageConformance(ConformanceBase):
    """Capability: an imported session keeps its submitted messages, or nothing is written."""

    async def test_import_carries_started_and_waiting_messages(self, world: World) -> None:
        """[A1] [Q1] the messages come back in order with their fates, started or waiting,
        and the session digest (which covers them) is the original's."""
        image = await read_session_image(world.store, await messaged_session(world))
        assert [(m.fate, m.started) for m in image.messages] == [
            (MessageFate.QUEUED, True),
            (MessageFate.INTERRUPTING, False),
            (MessageFate.QUEUED, False),
        ]
        without = msgspec.structs.replace(image, messages=[])
        assert session_digest(without) != session_digest(image)
        copy = _renamed(image, world.ns, _fresh_ns(world), SessionImage)
        await world.store.import_session(copy)
        sid = copy.session.id
        assert await world.store.list_session_messages(sid) == copy.messages
        assert await world.store.load_pending_messages(sid) == copy.messages[1:]
        again = await read_session_image(world.store, sid)
        assert again == copy
        assert session_digest(again) == session_digest(copy)
        receipt = await world.store.purge_session(sid)
        assert (receipt.messages, receipt.digest) == (3, session_digest(copy))

    async def test_import_refuses_messages_that_contradict_the_image(self, world: World) -> None:
        """A started message without its run, a waiting one whose run is imaged, positions
        not 1..n, a run id twice, one of another session, or taken in the store: refused
        whole, naming the message's run, writing nothing."""
        image = await read_session_image(world.store, await messaged_session(world))
        copy = _renamed(image, world.ns, _fresh_ns(world), SessionImage)
        one, two, three = copy.messages
        sid = copy.session.id

        def messages(*changed: SessionMessage) -> SessionImage:
            image: SessionImage = msgspec.structs.replace(copy, messages=list(changed))
            return image

        replace = msgspec.structs.replace
        cases: list[tuple[type[AgentledgerError], str, SessionImage]] = [
            (CorruptRecordError, two.run_id, messages(one, replace(two, started=True), three)),
            (CorruptRecordError, one.run_id, messages(replace(one, started=False), two, three)),
            (CorruptRecordError, three.run_id, messages(one, two, replace(three, position=4))),
            (CorruptRecordError, three.run_id, messages(one, three, two)),
            (CorruptRecordError, two.run_id, messages(one, two, replace(two, position=3))),
            (CorruptRecordError, two.run_id, messages(
                one, replace(two, session_id=image.session.id), three)),
            (CorruptRecordError, two.run_id, messages(
                one, replace(two, after=f"{two.run_id}-elsewhere"), three)),
            (RunConflictError, image.messages[2].run_id, messages(
                one, two, replace(image.messages[2], position=3, session_id=sid,
                                  after=two.run_id, running_run_id=""))),
        ]  # fmt: skip
        tracked = World(world.store, namespace=world.ns)
        tracked.session_ids = [*world.session_ids, sid]
        tracked.run_ids = [*world.run_ids, *(run.run_id for run in copy.runs)]
        for error, run_id, bad in cases:
            async with tracked.unchanged():
                with pytest.raises(error) as caught:
                    await world.store.import_session(bad)
            assert getattr(caught.value, "run_id", "") == run_id, caught.value
        with pytest.raises(SessionNotFoundError):
            await world.store.load_session(sid)
        await world.store.import_session(copy)
        assert await read_session_image(world.store, sid) == copy
