"""Each damage class, done by raw SQL to PostgreSQL tables, is refused on every read path [J1]."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres.migrations import _backfill_checksums
from tests.storage.damage import (
    LAST,
    assert_damaged_keys_are_corruption_on_retries,
    assert_every_read_refuses,
    assert_lifecycle_damage_refused_on_listings,
    assert_meaning_damage_is_corruption,
    page_through,
    write_log,
)

BYTES = {
    "payload of invalid UTF-8": "payload = '\\x7B2278223AFFFE7D'::bytea",
    "payload not JSON": "payload = convert_to('not json', 'UTF8')",
    "payload emptied": "payload = ''::bytea",
    "turn id": "turn_id = 'other-turn'",
    "event key": "event_key = event_key || '-edited'",
    "type": "type = 'planner_note_2'",
    "timestamp": "ts = ts + interval '1 millisecond'",
    "checksum": "checksum = checksum + 1",
}


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await PostgresStore.open(postgres_dsn) as opened:
        yield opened


async def _raw(dsn: str, sql: str, *args: object) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, args)
        assert cur.rowcount == 1


@pytest.mark.parametrize("seq", [1, 3, LAST])
@pytest.mark.parametrize("column", list(BYTES))
async def test_a_damaged_record_is_refused_on_every_read_path(
    store: PostgresStore, postgres_dsn: str, column: str, seq: int
) -> None:
    log = await write_log(World(store))
    update = f"UPDATE agentledger_records SET {BYTES[column]} WHERE run_id = %s AND seq = %s"
    await _raw(postgres_dsn, update, log.run_id, seq)
    by_key = column != "event key"
    await assert_every_read_refuses(store, log, seq, "checksum mismatch", by_key=by_key)


@pytest.mark.parametrize("seq", [1, 3, LAST - 1, LAST])
async def test_a_deleted_record_is_a_sequence_gap_and_paging_terminates(
    store: PostgresStore, postgres_dsn: str, seq: int
) -> None:
    """The issue's case: with record 3 gone, pages read 1,2,4,5,5; with the last gone,
    the cursor repeated forever. Now every page over the gap raises instead. A session
    listing names the damage as SQLite's does: with the last record gone, the run's
    stored log ends before its run_completed."""
    log = await write_log(World(store))
    delete = "DELETE FROM agentledger_records WHERE run_id = %s AND seq = %s"
    await _raw(postgres_dsn, delete, log.run_id, seq)
    if seq != LAST:
        await assert_every_read_refuses(store, log, seq, "sequence gap", by_key=False)
        return
    for limit in (1000, 2, 1):
        with pytest.raises(CorruptRecordError, match="not its run_completed") as caught:
            await page_through(store.list_session_run_records, log.session_id, limit)
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, str(LAST - 1))
        with pytest.raises(CorruptRecordError, match="sequence gap") as caught:
            await page_through(store.list_run_records, log.run_id, limit)
        assert (caught.value.run_id, caught.value.record_id) == (log.run_id, str(LAST))


async def test_a_retry_over_a_damaged_event_key_is_corruption(
    store: PostgresStore, postgres_dsn: str
) -> None:
    log = await write_log(World(store))

    async def damage_key(seq: int) -> None:
        update = (
            "UPDATE agentledger_records SET event_key = event_key || '-edited' "
            "WHERE run_id = %s AND seq = %s"
        )
        await _raw(postgres_dsn, update, log.run_id, seq)

    await assert_damaged_keys_are_corruption_on_retries(store, log, damage_key)


async def test_retries_and_repairs_call_damaged_meaning_corruption_and_listings_too(
    store: PostgresStore, postgres_dsn: str
) -> None:
    world = World(store)
    log = await write_log(world)

    async def damage(event_key: str, payload: bytes) -> None:
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            update = (
                "UPDATE agentledger_records SET payload = %s WHERE run_id = %s AND event_key = %s"
            )
            cur = await conn.execute(update, (payload, log.run_id, event_key))
            assert cur.rowcount == 1
            async with conn.transaction():
                await _backfill_checksums(conn)

    await assert_lifecycle_damage_refused_on_listings(store, world, log, damage)
    await assert_meaning_damage_is_corruption(store, world, log, damage)
