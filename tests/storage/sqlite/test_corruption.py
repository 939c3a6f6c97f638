"""Rows damaged behind the store's back surface as CorruptRecordError, never accepted [J1]."""

from __future__ import annotations

import sqlite3

import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage import RecordBuilder, RunStatus
from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from agentledger.storage.sqlite.schema import _backfill_checksums


def _raw(store: SQLiteStore, sql: str, *args: object) -> None:
    """Damage the file with a statement outside the store, as a bug or a person might.

    The checksums are then recomputed (as a buggy writer, or a migration over damage
    done before checksums existed, would leave them), so what is tested here is the
    check of the record's meaning; ``test_checksums`` covers damage to its bytes.
    """
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute(sql, args)
        _backfill_checksums(conn)
    finally:
        conn.close()


async def _started(world: World) -> RecordBuilder:
    sid = await world.session("s")
    return await world.root("r", session=sid)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"surprise": 1}',  # unknown field
        b'{"labels": 5}',  # wrong type
        b"{}{}",  # a second JSON value
        b'{"parent_run_id": "\xff"}',  # invalid UTF-8
        b"not json",
    ],
)
async def test_a_retried_start_over_a_corrupt_run_started_payload(
    store: SQLiteStore, world: World, payload: bytes
) -> None:
    run = await _started(world)
    _raw(
        store,
        "UPDATE records SET payload = ? WHERE run_id = ? AND type = 'run_started'",
        payload,
        run.run.run_id,
    )
    with pytest.raises(CorruptRecordError) as caught:
        await store.start_root_run(run.root_start())
    assert caught.value.run_id == run.run.run_id
    assert caught.value.record_id == "1"


async def test_a_retried_start_over_a_run_started_of_another_type(
    store: SQLiteStore, world: World
) -> None:
    run = await _started(world)
    _raw(store, "UPDATE records SET type = 'planner_note' WHERE run_id = ?", run.run.run_id)
    with pytest.raises(CorruptRecordError, match="expected type 'run_started'"):
        await store.start_root_run(run.root_start())


async def test_a_retried_start_over_a_timestamp_out_of_range(
    store: SQLiteStore, world: World
) -> None:
    run = await _started(world)
    _raw(store, "UPDATE records SET timestamp = ? WHERE run_id = ?", 2**62, run.run.run_id)
    with pytest.raises(CorruptRecordError) as caught:
        await store.start_root_run(run.root_start())
    assert caught.value.record_id == "1"
    with pytest.raises(CorruptRecordError):
        await store.list_run_records(run.run.run_id)


async def test_a_retried_start_whose_run_started_is_gone(store: SQLiteStore, world: World) -> None:
    run = await _started(world)
    _raw(store, "DELETE FROM records WHERE run_id = ?", run.run.run_id)
    with pytest.raises(CorruptRecordError, match="missing"):
        await store.start_root_run(run.root_start())


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("status", "paused"),
        ("start_outcome", "maybe"),
        ("labels", "{not json"),
        ("labels", '{"n": 1}'),
        ("started_at", 2**62),
    ],
)
async def test_a_corrupt_run_row(
    store: SQLiteStore, world: World, column: str, value: object
) -> None:
    run = await _started(world)
    _raw(store, f"UPDATE runs SET {column} = ? WHERE run_id = ?", value, run.run.run_id)
    with pytest.raises(CorruptRecordError) as caught:
        await store.load_run(run.run.run_id)
    assert caught.value.run_id == run.run.run_id
    with pytest.raises(CorruptRecordError):
        await store.append_run_record(world.note(run, "n1"))
    with pytest.raises(CorruptRecordError):
        await store.start_root_run(run.root_start())


async def test_a_corrupt_session_row(store: SQLiteStore, world: World) -> None:
    sid = await world.session("s")
    _raw(store, "UPDATE sessions SET status = 'dormant' WHERE id = ?", sid)
    with pytest.raises(CorruptRecordError, match="dormant"):
        await store.load_session(sid)
    with pytest.raises(CorruptRecordError):
        await store.list_sessions()


async def test_corrupt_session_labels(store: SQLiteStore, world: World) -> None:
    """[D6] stored labels that are not a JSON object of strings are corruption, not labels."""
    sid = await world.session("s", labels={"tenant": "acme"})
    for damaged in ('["tenant"]', '{"tenant": 1}', "not json"):
        _raw(store, "UPDATE sessions SET labels = ? WHERE id = ?", damaged, sid)
        with pytest.raises(CorruptRecordError, match="session"):
            await store.load_session(sid)
        with pytest.raises(CorruptRecordError):
            await store.list_sessions()
    with pytest.raises(CorruptRecordError):  # the filter reads the damaged JSON too
        await store.list_sessions(labels={"tenant": "acme"})


async def test_a_retried_terminal_over_a_corrupt_run_completed(
    store: SQLiteStore, world: World
) -> None:
    run = await _started(world)
    terminal = run.terminal(RunStatus.COMPLETED, at=world.now())
    await store.record_run_terminal(terminal)
    _raw(
        store,
        "UPDATE records SET payload = ? WHERE run_id = ? AND type = 'run_completed'",
        b'{"status": "success"}',  # phase is missing
        run.run.run_id,
    )
    with pytest.raises(CorruptRecordError):
        await store.record_run_terminal(terminal)


async def test_the_checker_reports_what_the_store_refuses(store: SQLiteStore, world: World) -> None:
    run = await _started(world)
    await world.finish(run)
    assert check_invariants(store.path) == []
    _raw(store, "UPDATE records SET payload = ? WHERE seq = 1", b'{"x": 1}')
    problems = check_invariants(store.path)
    assert "corrupt record '1'" in problems[0]
    # The rewrite also changed the bytes the run and session hold: their counters differ.
    assert [p.split(" differ ")[0] for p in problems[1:]] == [
        f"usage counters of run {run.run.run_id!r}",
        f"usage counters of session {run.run.session_id!r}",
    ]
