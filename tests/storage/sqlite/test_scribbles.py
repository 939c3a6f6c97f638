"""Bytes scribbled into a closed SQLite file are never read back silently [J1].

SQLite keeps no page checksums; the record checksum is what makes damage loud.
Each trial scribbles a few random bytes into one page that holds records,
reopens the file and reads every run's log and the session's log, at two page
sizes. Every read must either return exactly what was written or raise a typed
:class:`~agentledger.errors.AgentledgerError`: never different data.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
from pathlib import Path

from agentledger.errors import AgentledgerError
from agentledger.storage import Record
from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.check import check_invariants

TRIALS = 200
RUNS = 3
NOTES = 20
PAGE = 4096


async def _write(path: Path) -> tuple[str, list[str], dict[str, list[Record]]]:
    async with await SQLiteStore.open(path) as store:
        world = World(store)
        sid = await world.session("s")
        runs = [await world.root(f"r{i}", session=sid) for i in range(RUNS)]
        for n in range(NOTES):
            for i, run in enumerate(runs):
                body = b'{"note": "run %d note %d %s"}' % (i, n, b"x" * (n * 7))
                await store.append_run_record(world.note(run, f"n{n}", body=body))
        logs = await _read_all(store, sid, [run.run.run_id for run in runs])
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")  # every byte in the one file
    finally:
        conn.close()
    return sid, [run.run.run_id for run in runs], logs


async def _read_all(store: SQLiteStore, sid: str, run_ids: list[str]) -> dict[str, list[Record]]:
    logs: dict[str, list[Record]] = {}
    for limit in (1000, 5):
        for scope, list_page in [(rid, store.list_run_records) for rid in run_ids] + [
            (sid, store.list_session_run_records)
        ]:
            records: list[Record] = []
            cursor = ""
            for _ in range(200):  # a loop that runs this long is a paging bug
                page = await list_page(scope, cursor=cursor, limit=limit)
                records.extend(page.records)
                if not page.next_cursor:
                    break
                assert page.next_cursor != cursor
                cursor = page.next_cursor
            else:
                raise AssertionError(f"paging {scope!r} did not terminate")
            logs[f"{scope}/{limit}"] = records
    return logs


def _record_pages(data: bytes) -> list[int]:
    """The pages holding record payloads (found by their text)."""
    size = int.from_bytes(data[16:18], "big")
    assert size == PAGE, size
    return [
        start
        for start in range(PAGE, len(data), PAGE)
        if b'{"note": "run ' in data[start : start + PAGE]
    ]


def _remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


async def test_random_scribbles_into_record_pages_never_read_back_silently(
    tmp_path: Path,
) -> None:
    pristine = tmp_path / "pristine.db"
    sid, run_ids, expected = await _write(pristine)
    data = pristine.read_bytes()
    pages = _record_pages(data)
    assert len(pages) >= 3, len(pages)
    rng = random.Random(17)
    outcomes = {"intact": 0, "refused": 0}
    for trial in range(TRIALS):
        damaged = bytearray(data)
        page = rng.choice(pages)
        at = page + rng.randrange(8, PAGE - 8)  # past the page header
        for i in range(rng.randint(1, 6)):
            damaged[at + i] = rng.randrange(256)
        if damaged == data:
            continue
        target = tmp_path / f"scribbled-{trial}.db"  # no stale -wal or -shm beside it
        target.write_bytes(bytes(damaged))
        try:
            async with await SQLiteStore.open(target) as store:
                got = await _read_all(store, sid, run_ids)
        except AgentledgerError:
            outcomes["refused"] += 1
        else:
            assert got == expected, f"trial {trial}: scribble at {at} read back silently"
            outcomes["intact"] += 1
        _remove(target)
    assert outcomes["refused"] > TRIALS // 2, outcomes  # the scribbles did land on records


SCHEMA_STEP = 53
"""Every 53rd byte of the schema's pages is scribbled, one file each: ~230 files."""


async def _write_small(path: Path) -> None:
    async with await SQLiteStore.open(path) as store:
        world = World(store)
        await world.root("r", session=await world.session("s"))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()


def _schema_pages(path: Path) -> list[int]:
    """The byte offsets of the pages that hold the schema (``sqlite_schema``)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'").fetchall()
    finally:
        conn.close()
    return sorted((pageno - 1) * PAGE for (pageno,) in rows)


async def _open_both(target: Path) -> str:
    """Open ``target`` writable and read-only: "clean" or the typed refusal's class name.

    Each refusal must be an AgentledgerError naming the file; anything else
    (a UnicodeDecodeError from SQLite's own message quoting the damaged schema)
    escapes and fails the test.
    """
    outcome = "clean"
    for opener in (SQLiteStore.open_read_only, SQLiteStore.open):
        refusal: AgentledgerError | None = None
        try:
            async with await opener(target):
                pass
        except AgentledgerError as e:
            refusal = e
        if refusal is not None:
            assert str(target) in str(refusal), refusal
            outcome = type(refusal).__name__
    return outcome


async def test_a_schema_byte_that_is_not_utf8_is_a_typed_refusal_naming_the_file(
    tmp_path: Path,
) -> None:
    """SQLite quotes the damaged schema text in its message; its bytes are not UTF-8."""
    db = tmp_path / "damaged.db"
    await _write_small(db)
    data = bytearray(db.read_bytes())
    at = data.index(b"suspension_key TEXT NOT NULL") + len(b"suspension_key TEXT NOT NUL")
    data[at] = 0xD5  # "NUL\xd5": a syntax error SQLite reports quoting it
    db.write_bytes(bytes(data))
    assert await _open_both(db) == "CorruptRecordError"
    [finding] = check_invariants(db)  # `agentledger check` reports it, and goes on
    assert finding.startswith(f"{db}: "), finding
    assert "malformed database schema" in finding, finding


async def test_scribbles_into_the_schema_pages_are_typed_refusals_naming_the_file(
    tmp_path: Path,
) -> None:
    pristine = tmp_path / "pristine.db"
    await _write_small(pristine)
    data = pristine.read_bytes()
    pages = _schema_pages(pristine)
    assert len(pages) >= 1, pages
    outcomes: dict[str, int] = {}
    for page in pages:
        first = page + (100 if page == 0 else 0) + 8  # past the file and page headers
        for at in range(first, page + PAGE, SCHEMA_STEP):
            damaged = bytearray(data)
            damaged[at] ^= 0xA5  # a byte that is no longer ASCII, or no longer what it was
            target = tmp_path / f"scribbled-{at}.db"
            target.write_bytes(bytes(damaged))
            outcome = await _open_both(target)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            with contextlib.suppress(AgentledgerError):  # a schema version it cannot check
                check_invariants(target)  # findings, or a typed error: nothing else
            _remove(target)
    assert outcomes.get("CorruptRecordError", 0) > 10, outcomes  # the scribbles hit the schema
