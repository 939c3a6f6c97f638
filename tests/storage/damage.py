"""A small log to damage behind a store's back, and every read path that must refuse it [J1].

Both backends' damage tests write the same log (a started run, four notes,
its ``run_completed``: ids 1..6), damage it with raw SQL of their own dialect,
then assert that each read path reaching the damage raises
:class:`~agentledger.errors.CorruptRecordError` naming the run and the record,
and that paging over the damage terminates.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec
import pytest

from agentledger.errors import CorruptRecordError, RecordConflictError
from agentledger.storage import Page, Record, RecordBuilder, RunStart, RunStatus, RunTerminal
from agentledger.storage.conformance import World
from agentledger.storage.protocol import SessionAdmin, Store, VerifiedTranscripts

NOTES = 4
LAST = NOTES + 2
"""The id of the run_completed record."""
MAX_PAGES = 100
"""A paging loop over a six-record log that needs more pages than this is looping."""


class AdminStore(Store, SessionAdmin):
    """What the damage tests call."""


@dataclass(frozen=True)
class Log:
    """The damaged log's ids and the records written to it."""

    run_id: str
    session_id: str
    notes: list[Record]
    """Records 2..5."""
    end: RunTerminal
    """Record 6."""
    end_run: RunStart
    """The run as started."""


async def write_log(world: World) -> Log:
    """A completed run with records 1..6 in its own session."""
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    notes = [world.note(run, f"n{i}", body=b'{"note": %d}' % i) for i in range(NOTES)]
    await world.store.append_run_records(notes)
    end = run.terminal(RunStatus.COMPLETED, at=world.now())
    await world.store.record_run_terminal(end)
    return Log(run_id=run.run.run_id, session_id=sid, notes=notes, end=end, end_run=run.run)


async def page_through(list_page: Callable[..., Awaitable[object]], scope: str, limit: int) -> None:
    cursor = ""
    for _ in range(MAX_PAGES):
        page = await list_page(scope, cursor=cursor, limit=limit)
        assert isinstance(page, Page)
        if not page.next_cursor:
            return
        assert page.next_cursor != cursor, "a page returned the cursor it was given"
        cursor = page.next_cursor
    raise AssertionError(f"paging {scope!r} did not terminate in {MAX_PAGES} pages")


def read_paths(
    store: AdminStore, log: Log, seq: int, *, by_key: bool = True
) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every read path that reaches record ``seq`` of ``log``.

    ``by_key``: retries find the record by its event key (not when the damage
    changed the key: a retry then finds no record of that key, which is not a read
    of the damaged one).
    """
    paths: dict[str, Callable[[], Awaitable[object]]] = {
        "list_run_records": lambda: page_through(store.list_run_records, log.run_id, 1000),
        "list_run_records by 2": lambda: page_through(store.list_run_records, log.run_id, 2),
        "list_run_records by 1": lambda: page_through(store.list_run_records, log.run_id, 1),
        "list_session_run_records": lambda: page_through(
            store.list_session_run_records, log.session_id, 1000
        ),
        "list_session_run_records by 2": lambda: page_through(
            store.list_session_run_records, log.session_id, 2
        ),
    }
    if isinstance(store, VerifiedTranscripts):  # replay's whole-log read [R2]
        paths["verified_transcript_payloads"] = lambda: store.verified_transcript_payloads(
            log.run_id
        )
    if not by_key:
        return paths
    if 2 <= seq < LAST:
        note = log.notes[seq - 2]
        paths["exact append retry"] = lambda: store.append_run_record(note)
        paths["exact batch retry"] = lambda: store.append_run_records([note])
    if seq == LAST:
        paths["exact terminal retry"] = lambda: store.record_run_terminal(log.end)
        paths["repair_run_terminal"] = lambda: store.repair_run_terminal(log.end)
    return paths


async def assert_every_read_refuses(
    store: AdminStore, log: Log, seq: int, reason: str, *, by_key: bool = True
) -> None:
    """Each read path reaching record ``seq`` raises CorruptRecordError matching ``reason``.

    The error names the run and record ``seq``, on session listings too.
    """
    for name, read in read_paths(store, log, seq, by_key=by_key).items():
        with pytest.raises(CorruptRecordError, match=reason) as caught:
            await read()
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, str(seq)), name


async def assert_meaning_damage_is_corruption(
    store: AdminStore, world: World, log: Log, damage: Callable[[str, bytes], Awaitable[None]]
) -> None:
    """[J1] a stored record whose bytes are intact (checksum rewritten) but whose meaning
    is damaged is corruption on retries and repairs; a real difference stays a conflict.

    ``damage(event_key, payload)`` overwrites the payload of ``log``'s record with that
    key and recomputes the checksums, as a buggy writer would leave it.
    """
    note = log.notes[1]  # record 3
    other = msgspec.structs.replace(note, payload=b'{"note": "different"}')
    with pytest.raises(RecordConflictError):  # intact: a real difference is a conflict
        await store.append_run_record(other)
    await damage(note.event_key, b"not json")
    for retry in (store.append_run_record(note), store.append_run_records([note])):
        with pytest.raises(CorruptRecordError, match="payload") as caught:
            await retry
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, "3")
    failed = RecordBuilder(log.end_run).completed(RunStatus.FAILED, at=log.end.record.timestamp)
    await damage(log.end.record.event_key, failed.payload)
    for read in (store.record_run_terminal, store.repair_run_terminal):
        with pytest.raises(CorruptRecordError, match="contradicts its run") as caught:
            await read(log.end)
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, str(LAST))


async def assert_lifecycle_damage_refused_on_listings(
    store: AdminStore, world: World, log: Log, damage: Callable[[str, bytes], Awaitable[None]]
) -> None:
    """[J1] lifecycle payloads are decoded strictly on listings, and must fit their run.

    ``damage`` as for :func:`assert_meaning_damage_is_corruption` (checksums rewritten).
    """
    listed = (await store.list_run_records(log.run_id)).records
    started, completed = listed[0], listed[-1]
    failed = RecordBuilder(log.end_run).completed(RunStatus.FAILED, at=completed.timestamp)
    cases = [
        (started, b'{"surprise": 1, ' + started.payload[1:], "unknown field"),
        (completed, completed.payload + b" {}", "JSON value"),
        (completed, failed.payload, "contradicts its run"),
    ]
    for record, damaged, reason in cases:
        await damage(record.event_key, damaged)
        for name, read in read_paths(store, log, int(record.id), by_key=False).items():
            with pytest.raises(CorruptRecordError, match=reason) as caught:
                await read()
            assert (caught.value.run_id, caught.value.record_id) == (log.run_id, record.id), name
        await damage(record.event_key, record.payload)
        assert (await store.list_run_records(log.run_id)).records == listed


async def assert_damaged_keys_are_corruption_on_retries(
    store: AdminStore, log: Log, damage_key: Callable[[int], Awaitable[None]]
) -> None:
    """[J1] an exact retry of a record whose stored event key was damaged (so the key
    finds nothing) is corruption naming the run, the record and the field, not
    ``RunNotActiveError`` or a bare "missing": the operator restores, never retries.

    ``damage_key(seq)`` appends ``-edited`` to the stored event key of record ``seq``
    by raw SQL, leaving its checksum as written.
    """
    note = log.notes[1]  # record 3
    await damage_key(3)
    for retry in (store.append_run_record(note), store.append_run_records([note])):
        with pytest.raises(CorruptRecordError, match="event_key") as caught:
            await retry
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, "3")
        assert f"{note.event_key}-edited" in caught.value.reason
    carrying = msgspec.structs.replace(log.end, records=(note,))  # a retry carrying it
    with pytest.raises(CorruptRecordError, match="event_key") as caught:
        await store.record_run_terminal(carrying)
    assert (caught.value.run_id, caught.value.record_id) == (log.run_id, "3")
    await damage_key(LAST)
    for read in (store.record_run_terminal, store.repair_run_terminal):
        with pytest.raises(CorruptRecordError, match="event_key") as caught:
            await read(log.end)
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, str(LAST))
