"""[V4] [J1] SQLite's lean chain read gives what the whole read gives, and refuses the same
damage: every row verified, lifecycle records checked, gaps and lost ends loud.

On real SQLite files, damaged by raw SQL as in ``tests/storage/sqlite/test_damage.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage import payloads
from agentledger.storage.chain_rows import CODED_TYPES, NotLean, coded_type_sql, lean_segments
from agentledger.storage.conformance import World
from agentledger.storage.conformance._references import _turn
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite import reader as sqlite_reader
from agentledger.storage.sqlite.schema import _backfill_checksums
from agentledger.storage.transcript_chain import chain_links, chain_segments, reference_records


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with await SQLiteStore.open(tmp_path / "lean.db") as opened:
        yield opened


async def _conversation(world: World, turns: int, name: str = "c") -> list[str]:
    sid = await world.session(name)
    runs: list[str] = []
    for i in range(turns):
        run = await _turn(world, f"{name}{i}", sid, f"message {i}", after=runs[-1] if runs else "")
        runs.append(run.run.run_id)
    return runs


def _raw(store: SQLiteStore, sql: str, *args: object, checksums: bool = False) -> None:
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        assert conn.execute(sql, args).rowcount == 1
        if checksums:  # as a buggy writer would leave it: the bytes' checksum is right
            _backfill_checksums(conn)
    finally:
        conn.close()


@pytest.mark.parametrize("windowed", [False, True])
async def test_the_lean_read_gives_what_the_whole_read_gives(
    store: SQLiteStore, tmp_path: Path, windowed: bool
) -> None:
    """Each link's segment, record for record, as the read of every row in full builds it."""
    world = World(store)
    runs = await _conversation(world, 6)
    conn = sqlite3.connect(tmp_path / "lean.db", isolation_level=None)
    try:
        for run_id in (runs[0], runs[3], runs[-1]):
            lean = sqlite_reader.SQLiteReader(conn).transcript_chain(run_id, windowed=windowed)
            heads = sqlite_reader.SQLiteReader(conn)._heads(
                sqlite_reader._CHAIN_HEADS, {"run": run_id}
            )
            session = heads[run_id].session_id
            references = conn.execute(sqlite_reader._CHAIN_REFERENCES, (session,)).fetchall()
            index = reference_records(references, heads, per_second=1000, sealer=None)
            links = chain_links(run_id, heads, index)
            query = msgspec.json.encode([[k.run_id, k.first, k.through] for k in links])
            grouped: dict[str, list[object]] = {}
            for row in conn.execute(sqlite_reader._CHAIN_ROWS, (query,)):
                grouped.setdefault(row[0], []).append(row[1:])
            whole = chain_segments(links, heads, grouped, per_second=1000, sealer=None)
            assert lean == whole
            assert sum(1 for s in lean for r in s.records if r.type in payloads.TRANSCRIPT_TYPES)
    finally:
        conn.close()


async def test_rows_out_of_order_are_put_in_order(store: SQLiteStore, tmp_path: Path) -> None:
    """The statement has no ORDER BY: rows in any order give the same segments."""
    world = World(store)
    runs = await _conversation(world, 4)
    conn = sqlite3.connect(tmp_path / "lean.db", isolation_level=None)
    try:
        reader = sqlite_reader.SQLiteReader(conn)
        expected = reader.transcript_chain(runs[-1])
        heads = reader._heads(sqlite_reader._CHAIN_HEADS, {"run": runs[-1]})
        session = heads[runs[-1]].session_id
        references = conn.execute(sqlite_reader._CHAIN_REFERENCES, (session,)).fetchall()
        links = chain_links(
            runs[-1], heads, reference_records(references, heads, per_second=1000, sealer=None)
        )
        query = msgspec.json.encode([[k.run_id, k.first, k.through] for k in links])
        rows = conn.execute(sqlite_reader._LEAN_ROWS, (query,)).fetchall()
        assert lean_segments(links, heads, list(reversed(rows)), per_second=1000) == expected
        with pytest.raises(NotLean):  # a row missing: the whole read names the gap
            lean_segments(links, heads, rows[:3] + rows[4:], per_second=1000)
    finally:
        conn.close()


async def test_common_types_are_coded_and_others_come_as_text(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "codes.db")
    try:
        expression = coded_type_sql("?1")
        for code, name in enumerate(CODED_TYPES):
            assert conn.execute(f"SELECT {expression}", (name,)).fetchone() == (code,)
        assert conn.execute(f"SELECT {expression}", ("planner_note",)).fetchone() == (
            "planner_note",
        )
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("kind", "column"),
    [
        ("run_started", "checksum = checksum + 1"),
        ("run_completed", "checksum = checksum + 1"),
        ("run_completed", "timestamp = timestamp + 1"),
        ("transcript_messages_referenced", "checksum = checksum + 1"),
        ("transcript_messages_appended", "event_key = event_key || '-edited'"),
    ],
)
async def test_a_damaged_row_of_a_source_run_fails_the_replay(
    store: SQLiteStore, kind: str, column: str
) -> None:
    """Every row of the chain is verified, the rows replay does not return too."""
    world = World(store)
    runs = await _conversation(world, 4)
    source = runs[1]
    conn = sqlite3.connect(store.path, isolation_level=None)
    (seq,) = conn.execute(
        "SELECT seq FROM records WHERE run_id = ? AND type = ? ORDER BY seq LIMIT 1",
        (source, kind),
    ).fetchone()
    conn.close()
    _raw(store, f"UPDATE records SET {column} WHERE run_id = ? AND seq = ?", source, seq)
    with pytest.raises(CorruptRecordError, match="checksum mismatch") as caught:
        await build_messages_from_run_log(store, runs[-1])
    assert (caught.value.run_id, caught.value.record_id) == (source, str(seq))


@pytest.mark.parametrize(
    ("kind", "payload", "reason"),
    [
        ("run_started", b'{"surprise": 1}', "unknown field"),
        ("run_completed", b'{"status": "failed", "phase": "failed"}', "contradicts its run"),
    ],
)
async def test_a_misfit_lifecycle_record_of_a_source_run_fails_the_replay(
    store: SQLiteStore, kind: str, payload: bytes, reason: str
) -> None:
    """Lifecycle payloads are checked as a listing checks them, though the other runs'
    same payloads passed before (their passes are kept, a misfit is checked anew)."""
    world = World(store)
    runs = await _conversation(world, 4)
    assert len(await build_messages_from_run_log(store, runs[-1])) == 8  # passes kept
    source = runs[2]
    _raw(
        store,
        "UPDATE records SET payload = ? WHERE run_id = ? AND type = ?",
        payload,
        source,
        kind,
        checksums=True,
    )
    with pytest.raises(CorruptRecordError, match=reason) as caught:
        await build_messages_from_run_log(store, runs[-1])
    assert caught.value.run_id == source


async def test_a_lost_run_completed_fails_the_replay(store: SQLiteStore) -> None:
    """A completed run's log must end with its run_completed, not merely look shorter:
    the run replayed (its cut is its newest record) and a source (whose reference then
    names a record past its log)."""
    world = World(store)
    runs = await _conversation(world, 3)
    for run_id, reason in ((runs[-1], "not its run_completed"), (runs[0], "whose log ends")):
        _raw(store, "DELETE FROM records WHERE run_id = ? AND type = 'run_completed'", run_id)
        with pytest.raises(CorruptRecordError, match=reason) as caught:
            await build_messages_from_run_log(store, runs[-1])
        assert caught.value.run_id in (run_id, runs[1])


async def test_a_lost_message_row_of_a_source_run_is_a_gap(store: SQLiteStore) -> None:
    world = World(store)
    runs = await _conversation(world, 3)
    _raw(
        store,
        "DELETE FROM records WHERE run_id = ? AND type = 'transcript_messages_appended' "
        "AND event_key = 'input:messages'",
        runs[1],
    )
    with pytest.raises(CorruptRecordError, match="sequence gap") as caught:
        await build_messages_from_run_log(store, runs[-1])
    assert caught.value.run_id == runs[1]


@pytest.mark.parametrize("windowed", [False, True])
async def test_a_chain_of_many_turns_is_read_lean_once(
    store: SQLiteStore, tmp_path: Path, windowed: bool
) -> None:
    """The references the walk took are not read again: the rows statement is the lean one,
    run once (no read of the whole chain after it)."""
    world = World(store)
    runs = await _conversation(world, 5)
    conn = sqlite3.connect(tmp_path / "lean.db", isolation_level=None)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        segments = sqlite_reader.SQLiteReader(conn).transcript_chain(runs[-1], windowed=windowed)
    finally:
        conn.close()
    assert len(segments) == 5
    rows = [s for s in statements if "JOIN records" in s]
    assert len(rows) == 1, statements
    assert "!= 'transcript_messages_referenced'" in rows[0]
