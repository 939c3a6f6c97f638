"""Conformance: derived data names its source, and a purge may take it along [G2].

A run whose history was copied from another session carries a
``transcript_history_copied`` record; the store lists, for a session, every copy
of its history that other sessions hold, before and after the session's purge,
until the holding session is purged in turn. A malformed provenance record is
refused on write (it is listed strictly, so it could not be skipped later).

A purge's receipt lists the copies that remain; with ``cascade`` the sessions
holding them are purged whole in the same transaction and named instead, or, if one
may not be purged (active, running), nothing is.
"""

from __future__ import annotations

import msgspec
import pytest

from agentledger.errors import SessionActiveError, SessionPurgedError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import World
from agentledger.storage.derivation import HISTORY_COPIED, CopiedFrom, DerivedCopy
from agentledger.storage.types import Record
from agentledger.transcript import Message, TextPart, encode_messages

__all__ = ["CascadeConformance", "DerivedConformance"]


def _copied(world: World, run: RecordBuilder, source: CopiedFrom) -> Record:
    return run.record(HISTORY_COPIED, source.encode(), event_key="copied", at=world.now())


def _said(world: World, run: RecordBuilder, key: str, role: str, text: str) -> Record:
    message = Message(role=role, parts=(TextPart(text=text),))  # type: ignore[arg-type]
    return run.record(
        payloads.TRANSCRIPT_APPENDED,
        encode_messages((message,)),
        event_key=f"{key}:messages",
        at=world.now(),
    )


async def _summarised(world: World, copy: DerivedCopy, name: str, summary: str) -> tuple[str, str]:
    """A next turn after the copy's run, in its session, whose window (a compaction with
    ``summary``, or a plain cut if "") replaces the copy run's records: its run and the
    window record's id."""
    store = world.store
    run = world.run(name, session=copy.session_id)
    last = (await store.load_run(copy.run_id)).last_record_id
    ref = payloads.TranscriptReference(kind="next_turn", run_id=copy.run_id, through=last)
    first = run.record(
        payloads.TRANSCRIPT_REFERENCED,
        ref.encode(),
        event_key="transcript:referenced",
        at=world.now(),
    )
    await store.start_root_run(msgspec.structs.replace(run.root_start(), records=(first,)))
    said = await store.append_run_record(_said(world, run, "input", "user", "and then?"))
    body = payloads.TranscriptWindow(
        policy="compaction:100" if summary else "last_turns:1",
        start=payloads.TranscriptPosition(run_id=run.run.run_id, record=said.id),
        summary=summary,
        replaces=(payloads.WindowReplaces(run_id=copy.run_id, first="1", last=last),)
        if summary
        else (),
    )
    window = run.record(
        payloads.TRANSCRIPT_WINDOW, body.encode(), event_key="turn:1:window", at=world.now()
    )
    written = await store.append_run_record(window)
    await world.finish(run)
    return run.run.run_id, written.id


class DerivedConformance(ConformanceBase):
    async def test_a_summary_of_a_copy_is_listed_with_it(self, world: World) -> None:
        store = world.store
        source, holder, copy = await _source_and_holder(world, "summed")
        await _summarised(world, copy, "summed-cut", "")  # a plain cut restates nothing
        run_id, window = await _summarised(world, copy, "summed-next", "Summary: copied.")
        summary = DerivedCopy(session_id=holder, run_id=run_id, source=copy.source, summary=window)
        assert await store.list_derived_copies(source) == [copy, summary]
        receipt = await store.purge_session(source)
        assert receipt.derived == [copy, summary]
        assert await store.list_derived_copies(source) == [copy, summary]
        await store.end_session(holder, ended_at=world.now())
        assert (await store.purge_session(holder)).runs == 3
        assert await store.list_derived_copies(source) == []

    async def test_cascade_takes_a_summary_of_a_copy_with_its_session(self, world: World) -> None:
        store = world.store
        source, holder, copy = await _source_and_holder(world, "sumcas")
        await _summarised(world, copy, "sumcas-next", "Summary: what was copied.")
        await store.end_session(holder, ended_at=world.now())
        receipt = await store.purge_session(source, cascade=True)
        assert (receipt.cascaded, receipt.derived) == ([holder], [])
        assert await store.list_derived_copies(source) == []

    async def test_copies_of_a_session_are_listed_until_their_holder_is_purged(
        self, world: World
    ) -> None:
        store = world.store
        source_sid = await world.session("src")
        source = await world.root("src-root", session=source_sid)
        await store.append_run_record(world.note(source, "n"))
        await world.finish(source)
        holder_sid = await world.session("holder")
        fork = world.run("fork", session=holder_sid)
        copied_from = CopiedFrom(session_id=source_sid, run_id=source.run.run_id, through="3")
        start = msgspec.structs.replace(
            fork.root_start(), records=(_copied(world, fork, copied_from),)
        )
        await store.start_root_run(start)
        expected = [DerivedCopy(session_id=holder_sid, run_id=fork.run.run_id, source=copied_from)]
        assert await store.list_derived_copies(source_sid) == expected
        assert await store.list_derived_copies(holder_sid) == []
        await store.end_session(source_sid, ended_at=world.now())
        await store.purge_session(source_sid)
        assert await store.list_derived_copies(source_sid) == expected  # what remains
        await world.finish(fork)
        await store.end_session(holder_sid, ended_at=world.now())
        await store.purge_session(holder_sid)
        assert await store.list_derived_copies(source_sid) == []

    async def test_a_malformed_provenance_record_is_refused(self, world: World) -> None:
        sid = await world.session("bad")
        run = await world.root("bad-root", session=sid)
        bad = run.record(HISTORY_COPIED, b'{"run_id": "x"}', event_key="copied", at=world.now())
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.append_run_record(bad)


async def _source_and_holder(world: World, name: str) -> tuple[str, str, DerivedCopy]:
    """A finished, ended source session and a holder session with a copy of it (active)."""
    store = world.store
    source_sid = await world.session(f"{name}-src")
    source = await world.root(f"{name}-src-root", session=source_sid)
    await world.finish(source)
    await store.end_session(source_sid, ended_at=world.now())
    holder_sid = await world.session(f"{name}-holder")
    fork = world.run(f"{name}-fork", session=holder_sid)
    copied_from = CopiedFrom(session_id=source_sid, run_id=source.run.run_id, through="2")
    start = msgspec.structs.replace(fork.root_start(), records=(_copied(world, fork, copied_from),))
    await store.start_root_run(start)
    await world.finish(fork)
    copy = DerivedCopy(session_id=holder_sid, run_id=fork.run.run_id, source=copied_from)
    return source_sid, holder_sid, copy


async def _fork_of(world: World, name: str, copy: DerivedCopy) -> DerivedCopy:
    """A finished, active session holding a copy of the history ``copy`` holds."""
    holder_sid = await world.session(f"{name}-holder")
    fork = world.run(f"{name}-fork", session=holder_sid)
    copied_from = CopiedFrom(session_id=copy.session_id, run_id=copy.run_id, through="2")
    start = msgspec.structs.replace(fork.root_start(), records=(_copied(world, fork, copied_from),))
    await world.store.start_root_run(start)
    await world.finish(fork)
    return DerivedCopy(session_id=holder_sid, run_id=fork.run.run_id, source=copied_from)


class CascadeConformance(ConformanceBase):
    async def test_a_purge_reaches_copies_of_copies(self, world: World) -> None:
        store = world.store
        source, holder, copy = await _source_and_holder(world, "deep")
        again = await _fork_of(world, "deep2", copy)
        assert await store.list_derived_copies(holder) == [again]  # it names its own source
        assert await store.list_derived_copies(source) == [copy]
        await store.end_session(holder, ended_at=world.now())
        async with world.unchanged():  # the fork of the fork is still active
            with pytest.raises(SessionActiveError) as refused:
                await store.purge_session(source, cascade=True)
        assert refused.value.session_id == again.session_id
        await store.end_session(again.session_id, ended_at=world.now())
        receipt = await store.purge_session(source, cascade=True)
        assert (receipt.cascaded, receipt.derived) == ([holder, again.session_id], [])
        for gone in (holder, again.session_id):
            with pytest.raises(SessionPurgedError):
                await store.load_session(gone)

    async def test_a_purge_without_cascade_lists_copies_of_copies(self, world: World) -> None:
        source, _, copy = await _source_and_holder(world, "deeplist")
        again = await _fork_of(world, "deeplist2", copy)
        receipt = await world.store.purge_session(source)
        assert (receipt.derived, receipt.cascaded) == ([copy, again], [])
        assert (await world.store.load_session(again.session_id)).id == again.session_id

    async def test_a_purge_lists_the_copies_that_remain(self, world: World) -> None:
        source, holder, copy = await _source_and_holder(world, "keep")
        receipt = await world.store.purge_session(source)
        assert (receipt.derived, receipt.cascaded) == ([copy], [])
        assert (await world.store.load_session(holder)).id == holder  # it remains
        assert await world.store.purge_session(source, cascade=True) == receipt  # kept

    async def test_cascade_purges_the_holders_with_the_session(self, world: World) -> None:
        source, holder, _ = await _source_and_holder(world, "cascade")
        await world.store.end_session(holder, ended_at=world.now())
        receipt = await world.store.purge_session(source, cascade=True)
        assert (receipt.cascaded, receipt.derived) == ([holder], [])
        with pytest.raises(SessionPurgedError):
            await world.store.load_session(holder)
        kept = await world.store.purge_session(holder)  # its own tombstone and receipt
        assert (kept.session_id, kept.runs) == (holder, 1)
        assert await world.store.list_derived_copies(source) == []

    async def test_cascade_refuses_an_active_holder_and_purges_nothing(self, world: World) -> None:
        source, holder, _ = await _source_and_holder(world, "refused")
        async with world.unchanged():
            with pytest.raises(SessionActiveError) as refused:
                await world.store.purge_session(source, cascade=True)
        assert refused.value.session_id == holder
