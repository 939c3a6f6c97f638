"""check_invariants: silent on a sound file, specific about each kind of damage."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from agentledger.storage import Checkpoint
from agentledger.storage.conformance import World
from agentledger.storage.conformance._messages import queued_start, submission
from agentledger.storage.sqlite import SQLiteStore, check_invariants


async def _populate(path: Path) -> None:
    async with await SQLiteStore.open(path, durability="normal") as store:
        world = World(store, namespace="chk")
        sid = await world.session("s", labels={"tenant": "acme"})
        done = await world.root("done", session=sid)
        await store.append_run_record(world.note(done, "n1"))
        await store.append_run_record(world.note(done, "n2"))
        await world.finish(done)
        waiting = await world.root("waiting", session=sid)
        await store.record_run_suspension(
            waiting.suspension(Checkpoint(id="cp", data=b"x"), at=world.now())
        )
        parent = await world.root("parent", session=sid)
        await world.child("child", parent=parent)
        await store.submit_message(submission(world, sid, "m1"))  # waits for chk-parent
        other = await world.session("s2")
        started = await store.submit_message(submission(world, other, "m0"))
        await store.start_root_run(await queued_start(world, started))


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("check") / "sound.db"
    asyncio.run(_populate(path))
    return path


@pytest.fixture
def damaged(sound: Path, tmp_path: Path) -> Path:
    target = tmp_path / "damaged.db"
    source = sqlite3.connect(sound)
    copy = sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return target


def test_a_sound_file_has_no_violations(sound: Path) -> None:
    assert check_invariants(sound) == []


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (
            "DELETE FROM records WHERE run_id = 'chk-done' AND type = 'run_completed'",
            "completed with 0 run_completed records",
        ),
        ("UPDATE runs SET status = 'running' WHERE run_id = 'chk-done'", "running but has 1"),
        ("UPDATE runs SET status = 'failed' WHERE run_id = 'chk-parent'", "failed with 0"),
        ("DELETE FROM checkpoints WHERE run_id = 'chk-waiting'", "suspended with checkpoint=False"),
        (
            "DELETE FROM records WHERE run_id = 'chk-waiting' AND type = 'run_suspended'",
            "and 0 run_suspended records",
        ),
        (
            "INSERT INTO checkpoints (run_id, id, data) VALUES ('chk-parent', 'cp', x'00')",
            "running but holds a checkpoint",
        ),
        ("DELETE FROM records WHERE run_id = 'chk-done' AND seq = 2", "without gaps"),
        ("UPDATE records SET seq = 7 WHERE run_id = 'chk-done' AND seq = 1", "run_started"),
        (
            "INSERT INTO records (run_id, seq, agent_id, session_id, turn_id, event_key, type, "
            "timestamp, payload) VALUES ('chk-ghost', 1, 'a', '', '', 'k', 't', 0, x'7b7d')",
            "record without its run: 'chk-ghost'",
        ),
        ("DELETE FROM sessions WHERE id = 'chk-s'", "its session 'chk-s' is missing"),
        ("DELETE FROM runs WHERE run_id = 'chk-parent'", "its parent 'chk-parent' is missing"),
        (
            "UPDATE runs SET terminal_key = 'elsewhere' WHERE run_id = 'chk-done'",
            "terminal_key 'elsewhere' names no run_completed record",
        ),
        (
            "UPDATE runs SET link_key = 'elsewhere' WHERE run_id = 'chk-child'",
            "link_key 'elsewhere' names no child_run_linked record",
        ),
        (
            "UPDATE records SET agent_id = 'intruder' WHERE run_id = 'chk-done' AND seq = 2",
            "another agent or session",
        ),
        ("INSERT INTO session_tombstones (id) VALUES ('chk-s')", "run of a purged session"),
        (
            "UPDATE records SET payload = CAST('{\"status\": 1}' AS BLOB) "
            "WHERE run_id = 'chk-done' AND type = 'run_completed'",
            "corrupt record '4' of run 'chk-done'",
        ),
        (
            "UPDATE session_labels SET value = 'other'",
            "label index row disagreeing with its session: session 'chk-s', label 'tenant'",
        ),
        (
            "UPDATE session_labels SET status = 'ended'",
            "label index row disagreeing with its session: session 'chk-s'",
        ),
        (
            "INSERT INTO session_labels VALUES ('chk-ghost', 'k', 'v', 'active', 0)",
            "label index row disagreeing with its session: session 'chk-ghost', label 'k'",
        ),
        (
            "DELETE FROM session_labels",
            "session label missing from the label index: session 'chk-s', label 'tenant'",
        ),
        (
            "UPDATE session_messages SET started = 0 WHERE run_id = 'chk-m0'",
            "message waiting though its run has started: 'chk-m0'",
        ),
        (
            "UPDATE session_messages SET started = 1 WHERE run_id = 'chk-m1'",
            "message marked started without its run: 'chk-m1'",
        ),
        (
            "UPDATE session_messages SET pos = 3 WHERE run_id = 'chk-m1'",
            "not numbered 1, 2, ... without gaps: 'chk-s'",
        ),
        (
            "UPDATE session_messages SET session_id = 'chk-gone' WHERE run_id = 'chk-m1'",
            "message of a missing or purged session: 'chk-m1'",
        ),
        ("DELETE FROM _agentledger_migrations", "no agentledger migrations"),
        (
            "INSERT INTO _agentledger_migrations VALUES (99, 'future', 0)",
            "written by a newer agentledger (schema 99, this one knows",
        ),
    ],
)
def test_each_kind_of_damage_is_reported(damaged: Path, damage: str, expected: str) -> None:
    conn = sqlite3.connect(damaged, isolation_level=None)
    try:
        conn.execute(damage)
    finally:
        conn.close()
    problems = check_invariants(damaged)
    assert any(expected in p for p in problems), problems


def test_a_damaged_btree_fails_the_integrity_check(damaged: Path) -> None:
    conn = sqlite3.connect(damaged, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        # Point the session index of records at the runs' session index: the
        # b-tree no longer holds what the schema says it holds.
        (runs_index,) = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'runs_by_session'"
        ).fetchone()
        conn.execute(
            "UPDATE sqlite_master SET rootpage = ? WHERE name = 'records_by_session'",
            (runs_index,),
        )
    finally:
        conn.close()
    problems = check_invariants(damaged)
    assert any("missing from index records_by_session" in p for p in problems), problems


def test_a_missing_file_is_reported_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    assert check_invariants(missing) == [f"{missing}: no such database file"]
    assert not missing.exists()


def test_a_file_that_is_not_a_database_is_reported(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"junk" * 1024)
    (problem,) = check_invariants(junk)
    assert "not a database" in problem
