"""[G1] Migration 17 moves a PostgreSQL search index kept as a table of one row per message
(migration 15) onto the records' rows: each record takes the words of its messages and
the position of its last entry, so every search answers what it answered before, in the
same order, ``check`` finds the index sound, and the records written afterwards come
after them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from agentledger.storage import payloads
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import check as pg_check
from agentledger.storage.postgres import migrations as pg_migrations
from agentledger.storage.postgres import search as pg_search
from agentledger.storage.postgres.rows import RECORD_COLUMNS, record_from_row
from agentledger.storage.search import index_entries
from agentledger.transcript import Message, TextPart, encode_messages
from tests.storage.postgres.server import create_database, drop_database


@pytest.fixture
async def dsn(postgres_dsn: str) -> AsyncIterator[str]:
    made = create_database(postgres_dsn)
    try:
        yield made
    finally:
        drop_database(made)


def _said(*texts: str) -> bytes:
    return encode_messages([Message(role="user", parts=(TextPart(text=t),)) for t in texts])


async def _fill(world: World) -> None:
    for s in range(3):
        sid = await world.session(f"s{s}", labels={"tenant": f"t{s % 2}"})
        run = await world.root(f"s{s}-r", session=sid)
        for m in range(4):
            said = _said(f"refund {s} {m}", f"order {m} refund", "no match here")
            record = run.record(payloads.TRANSCRIPT_APPENDED, said, event_key=f"m{m}",
                                at=world.now())  # fmt: skip
            await world.store.append_run_record(record)
        await world.finish(run)


async def _everything(store: PostgresStore, text: str, **kw: Any) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    cursor = ""
    while True:
        page = await store.search(text, cursor=cursor, limit=5, **kw)
        found += [(h.session_id, h.run_id, h.record_id, h.message_index, h.snippet)
                  for h in page.hits]  # fmt: skip
        if not page.next_cursor:
            return found
        cursor = page.next_cursor


async def _answers(store: PostgresStore) -> list[list[tuple[Any, ...]]]:
    return [
        await _everything(store, "refund"),
        await _everything(store, "order refund", labels={"tenant": "t0"}),
        await _everything(store, "refund 2", session_id="mig-s1"),
    ]


async def _as_migration_16_left_it(conn: psycopg.AsyncConnection[Any]) -> dict[Any, int]:
    """Rewrite the index as the table of one row per message, ids spaced apart (as
    concurrent writers leave them); each record's last id."""
    cur = await conn.execute(
        f"SELECT {RECORD_COLUMNS} FROM agentledger_records WHERE search_pos IS NOT NULL "
        "ORDER BY search_pos"
    )
    rows, last, next_id = [], {}, 100
    for row in await cur.fetchall():
        record = record_from_row(row)
        for e in index_entries(record):
            rows.append((next_id, record.session_id, record.run_id, int(record.id),
                         e.message_index, e.role, record.timestamp, e.body,
                         pg_search.lexemes_of(e.body)))  # fmt: skip
            last[(record.run_id, int(record.id))] = next_id
            next_id += 1
        next_id += 3
    table = pg_search.MIGRATION.split("CREATE TABLE agentledger_search_left_out")[0]
    await conn.execute(table)  # type: ignore[arg-type]
    async with conn.cursor() as many:
        await many.executemany(
            "INSERT INTO agentledger_search (id, session_id, run_id, seq, message, role, ts, "
            "body, words) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector)",
            rows,
        )
    await conn.execute("SELECT setval('agentledger_search_id_seq', %s)", (next_id,))
    await conn.execute(
        "ALTER TABLE agentledger_records DROP COLUMN search_pos, DROP COLUMN words; "
        "DROP SEQUENCE agentledger_search_pos"
    )
    await conn.execute(f"DELETE FROM {pg_migrations.MIGRATIONS_TABLE} WHERE version = 17")
    return last


async def test_migration_17_moves_the_entries_onto_the_records(dsn: str) -> None:
    store = await PostgresStore.open(dsn, min_size=1, max_size=2)
    try:
        await _fill(World(store, namespace="mig"))
        before = await _answers(store)
    finally:
        await store.close()
    assert [len(found) for found in before] == [24, 8, 2]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        last = await _as_migration_16_left_it(conn)
        assert await pg_migrations.migrate(conn) == [17]
        cur = await conn.execute(
            "SELECT run_id, seq, search_pos FROM agentledger_records WHERE search_pos IS NOT NULL"
        )
        assert {(rid, seq): pos for rid, seq, pos in await cur.fetchall()} == last
        cur = await conn.execute("SELECT to_regclass('agentledger_search') IS NULL")
        assert await cur.fetchone() == (True,)
    assert await pg_check.check_invariants(dsn) == []
    store = await PostgresStore.open(dsn, min_size=1, max_size=2)
    try:
        assert await _answers(store) == before
        world = World(store, namespace="new")
        run = await world.root("r", session=await world.session("s"))
        said = _said("refund newest")
        record = run.record(payloads.TRANSCRIPT_APPENDED, said, event_key="k", at=world.now())
        await store.append_run_record(record)
        newest = await store.search("refund", limit=1)
        assert [(h.session_id, h.snippet) for h in newest.hits] == [("new-s", "**refund** newest")]
    finally:
        await store.close()
    assert await pg_check.check_invariants(dsn) == []
