"""[G1] What PostgreSQL's newest-first order guarantees: a record's position in the index
comes from a sequence when the record is written, not when its transaction commits. Within
one session the two agree (its writers take turns on the session row until they commit);
across sessions, a write that took its position first may commit last. A traversal of the
pages still shows every message committed before its first page exactly once, in position
order: a write in flight while a page is read, committed before the next, is on the next
page if its position is below the cursor, never skipped and never repeated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
import psycopg
import pytest

from agentledger.storage import payloads
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres import search as pg_search
from agentledger.storage.postgres.rows import RECORD_COLUMNS, record_params
from agentledger.storage.types import Record
from agentledger.transcript import Message, TextPart, encode_messages
from tests.storage.postgres.server import create_database, drop_database


@pytest.fixture
async def dsn(postgres_dsn: str) -> AsyncIterator[str]:
    made = create_database(postgres_dsn)
    try:
        yield made
    finally:
        drop_database(made)


def _said(text: str) -> bytes:
    return encode_messages([Message(role="user", parts=(TextPart(text=text),))])


async def _write_in_flight(conn: psycopg.AsyncConnection[Any], record: Record) -> None:
    """Write ``record`` as an append does (its position taken from the sequence), in
    ``conn``'s transaction, left open."""
    cur = await conn.execute(
        "UPDATE agentledger_sessions SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq",
        (record.session_id,),
    )
    row = await cur.fetchone()
    assert row is not None
    words = pg_search.record_words(record)
    await conn.execute(
        f"INSERT INTO agentledger_records ({RECORD_COLUMNS}, session_seq, search_pos, words) "
        f"VALUES ({', '.join(['%s'] * 11)}, {pg_search.POSITION}, %s::tsvector)",
        (*record_params(record, row[0]), words, words),
    )


async def test_a_write_committed_out_of_id_order_is_on_the_next_page(dsn: str) -> None:
    store = await PostgresStore.open(dsn, min_size=1, max_size=2)
    try:
        world = World(store, namespace="ord")
        runs = {}
        for name in ("a", "b"):
            sid = await world.session(name)
            runs[name] = await world.root(f"{name}-r", session=sid)
        said = payloads.TRANSCRIPT_APPENDED
        await store.append_run_record(
            runs["b"].record(said, _said("refund first"), event_key="old", at=world.now())
        )
        # Session a's write takes its position and stays in flight (its transaction open)...
        late = runs["a"].record(payloads.TRANSCRIPT_APPENDED, _said("refund late"),
                                event_key="late", at=world.now())  # fmt: skip
        stored = msgspec.structs.replace(late, id="2")  # its id in its run
        async with await psycopg.AsyncConnection.connect(dsn) as in_flight:
            await _write_in_flight(in_flight, stored)
            # ... while session b's write takes a later id and commits first.
            await store.append_run_record(
                runs["b"].record(said, _said("refund second"), event_key="new", at=world.now())
            )
            first = await store.search("refund", limit=1)
            assert [h.session_id for h in first.hits] == ["ord-b"]
            assert first.hits[0].snippet == "**refund** second"
            await in_flight.commit()  # committed last, with the lowest id but one
        rest = await store.search("refund", limit=5, cursor=first.next_cursor)
        # Not skipped, not repeated: the late write is on the next page, by its id.
        assert [h.snippet for h in rest.hits] == ["**refund** late", "**refund** first"]
        fresh = await store.search("refund")
        # Newest first is the order of the ids, not of the commits, across sessions.
        assert [h.snippet for h in fresh.hits] == [
            "**refund** second", "**refund** late", "**refund** first"
        ]  # fmt: skip
    finally:
        await store.close()


async def test_a_word_longer_than_postgresql_keeps_is_left_out(dsn: str) -> None:
    """A message may hold a word longer than a lexeme can be: the append is stored and the
    message found by its other words (PostgreSQL's own parser skips such words too)."""
    store = await PostgresStore.open(dsn, min_size=1, max_size=2)
    try:
        world = World(store, namespace="long")
        run = await world.root("r", session=await world.session("s"))
        text = f"refund {'x' * 3000}"
        record = run.record(payloads.TRANSCRIPT_APPENDED, _said(text), event_key="k",
                            at=world.now())  # fmt: skip
        await store.append_run_record(record)
        assert [h.record_id for h in (await store.search("refund")).hits] == ["2"]
    finally:
        await store.close()


async def test_records_holding_the_terms_only_in_different_messages_are_passed_over(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's words are those of all its messages: a record whose messages each hold
    only some of the terms matches them but gives no hit, and the search reads on (in
    batches of a page) until it finds the message that holds them all, in the window, past
    it and within one session alike."""
    store = await PostgresStore.open(dsn, min_size=1, max_size=2)
    try:
        world = World(store, namespace="split")
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        said = payloads.TRANSCRIPT_APPENDED
        await store.append_run_record(
            run.record(said, _said("refund 1182"), event_key="both", at=world.now())
        )
        for i in range(5):
            split = encode_messages([
                Message(role="user", parts=(TextPart(text="refund"),)),
                Message(role="assistant", parts=(TextPart(text="order 1182"),)),
            ])  # fmt: skip
            await store.append_run_record(
                run.record(said, split, event_key=f"split{i}", at=world.now())
            )
        for window in (pg_search.WINDOW, 2):
            monkeypatch.setattr(pg_search, "WINDOW", window)
            for scope in ({}, {"session_id": sid}):
                page = await store.search("refund 1182", limit=1, **scope)
                assert [(h.record_id, h.snippet) for h in page.hits] == [
                    ("2", "**refund** **1182**")
                ]
                assert page.next_cursor == ""
    finally:
        await store.close()
