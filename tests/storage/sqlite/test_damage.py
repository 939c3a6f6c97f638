"""Each damage class, done by raw SQL to a SQLite file, is refused on every read path [J1]."""

from __future__ import annotations

import sqlite3

import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.schema import _backfill_checksums
from tests.storage.damage import (
    LAST,
    assert_damaged_keys_are_corruption_on_retries,
    assert_every_read_refuses,
    assert_lifecycle_damage_refused_on_listings,
    assert_meaning_damage_is_corruption,
    write_log,
)

BYTES = {
    "payload of invalid UTF-8": "payload = X'7B2278223AFFFE7D'",
    "payload not JSON": "payload = CAST('not json' AS BLOB)",
    "payload emptied": "payload = X''",
    "turn id": "turn_id = 'other-turn'",
    "event key": "event_key = event_key || '-edited'",
    "type": "type = 'planner_note_2'",
    "timestamp": "timestamp = timestamp + 1",
    "checksum": "checksum = checksum + 1",
}


def _raw(store: SQLiteStore, sql: str, *args: object) -> None:
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        assert conn.execute(sql, args).rowcount == 1
    finally:
        conn.close()


@pytest.mark.parametrize("seq", [1, 3, LAST])
@pytest.mark.parametrize("column", list(BYTES))
async def test_a_damaged_record_is_refused_on_every_read_path(
    store: SQLiteStore, world: World, column: str, seq: int
) -> None:
    log = await write_log(world)
    _raw(store, f"UPDATE records SET {BYTES[column]} WHERE run_id = ? AND seq = ?", log.run_id, seq)
    by_key = column != "event key"
    await assert_every_read_refuses(store, log, seq, "checksum mismatch", by_key=by_key)


@pytest.mark.parametrize("seq", [1, 3, LAST - 1])
async def test_a_deleted_record_is_a_sequence_gap_and_paging_terminates(
    store: SQLiteStore, world: World, seq: int
) -> None:
    log = await write_log(world)
    _raw(store, "DELETE FROM records WHERE run_id = ? AND seq = ?", log.run_id, seq)
    await assert_every_read_refuses(store, log, seq, "sequence gap", by_key=False)


async def test_a_retry_over_a_damaged_event_key_is_corruption(
    store: SQLiteStore, world: World
) -> None:
    log = await write_log(world)

    async def damage_key(seq: int) -> None:
        edit = "event_key = event_key || '-edited'"
        _raw(store, f"UPDATE records SET {edit} WHERE run_id = ? AND seq = ?", log.run_id, seq)

    await assert_damaged_keys_are_corruption_on_retries(store, log, damage_key)


async def test_retries_and_repairs_call_damaged_meaning_corruption_and_listings_too(
    store: SQLiteStore, world: World
) -> None:
    log = await write_log(world)

    async def damage(event_key: str, payload: bytes) -> None:
        conn = sqlite3.connect(store.path, isolation_level=None)
        try:
            update = "UPDATE records SET payload = ? WHERE run_id = ? AND event_key = ?"
            assert conn.execute(update, (payload, log.run_id, event_key)).rowcount == 1
            _backfill_checksums(conn)
        finally:
            conn.close()

    await assert_lifecycle_damage_refused_on_listings(store, world, log, damage)
    await assert_meaning_damage_is_corruption(store, world, log, damage)


async def test_a_completed_run_missing_its_run_completed(store: SQLiteStore, world: World) -> None:
    """SQLite derives a run's newest id from its records, so the log just looks shorter:
    a completed run whose log does not end with run_completed is corruption, on run
    listings and, at their end, session listings (whose positions have gaps by design)."""
    log = await write_log(world)
    _raw(store, "DELETE FROM records WHERE run_id = ? AND seq = ?", log.run_id, LAST)
    await assert_every_read_refuses(store, log, LAST - 1, "not its run_completed", by_key=False)
    for retry in (store.record_run_terminal, store.repair_run_terminal):
        with pytest.raises(CorruptRecordError, match="missing"):
            await retry(log.end)


async def test_a_suspended_run_missing_its_run_suspended(store: SQLiteStore, world: World) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    await world.store.append_run_record(world.note(run, "n"))
    await world.suspend(run)
    _raw(store, "DELETE FROM records WHERE run_id = ? AND type = 'run_suspended'", run.run.run_id)
    for read in (store.list_run_records, store.list_session_run_records):
        scope = run.run.run_id if read == store.list_run_records else sid
        with pytest.raises(CorruptRecordError, match="not its run_suspended") as caught:
            await read(scope)
        assert (caught.value.run_id, caught.value.record_id) == (run.run.run_id, "2")
