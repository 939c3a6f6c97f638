"""`agentledger check`: every invariant and the strict decoding of every stored record."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.schema import _backfill_checksums
from tests.cli.conftest import Demo, run_cli

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _sql(db: Path, statement: str, *params: object) -> None:
    with sqlite3.connect(db) as conn:
        changed = conn.execute(statement, params).rowcount
    conn.close()
    assert changed >= 1, statement


def test_a_sound_database_has_no_findings(demo: Demo) -> None:
    done = run_cli("--db", str(demo.db), "check")
    assert done.code == 0, done.out
    assert done.out.splitlines()[-1].endswith(": no findings")
    data = run_cli("--db", str(demo.db), "check", "--json").json()
    assert data["ok"] is True
    assert data["findings"] == []
    assert (data["sessions"], data["runs"]) == (1, 6)
    assert data["records"] > 50


@pytest.mark.parametrize(
    ("damage", "finding"),
    [
        (
            'UPDATE records SET payload = CAST(\'{"status":"bogus"}\' AS BLOB) '
            "WHERE type = 'run_completed' AND run_id = :run",
            "corrupt record",
        ),
        (
            'UPDATE records SET payload = CAST(\'[{"role":"robot","parts":[]}]\' AS BLOB) '
            "WHERE type = 'transcript_messages_appended' AND run_id = :run",
            "transcript_messages_appended",
        ),
        (
            "UPDATE records SET payload = CAST('{\"phase\":' AS BLOB) "
            "WHERE type = 'run_phase_changed' AND run_id = :run",
            "payload is not one JSON value",
        ),
        (
            'UPDATE records SET payload = CAST(\'{"phase":"dancing"}\' AS BLOB) '
            "WHERE type = 'run_phase_changed' AND run_id = :run",
            "run_phase_changed",
        ),
        ("DELETE FROM records WHERE run_id = :run AND seq = 3", "without gaps"),
        ("DELETE FROM records WHERE run_id = :run AND seq = 3", "sequence gap"),
        ("DELETE FROM checkpoints WHERE run_id = :suspended", "suspended with checkpoint=False"),
        (
            "UPDATE records SET payload = X'7B2278223AFFFE7D' WHERE run_id = :run AND seq = 3",
            "checksum mismatch",
        ),
        (
            "UPDATE records SET turn_id = 'scribbled' WHERE run_id = :run AND seq = 2",
            "corrupt record '2'",
        ),
        (
            "UPDATE records SET event_key = event_key || '-edited' WHERE run_id = :run AND seq = 2",
            "checksum mismatch",
        ),
        (
            "DELETE FROM records WHERE run_id = :run AND type = 'run_completed'",
            "not its run_completed",
        ),
    ],
    ids=[
        "lifecycle",
        "transcript",
        "not-json",
        "typed-event",
        "gap",
        "sequence-gap",
        "checkpoint",
        "bytes",
        "turn-id",
        "event-key",
        "missing-last-record",
    ],
)
def test_damage_is_found_and_exits_1(demo: Demo, tmp_path: Path, damage: str, finding: str) -> None:
    db = demo.copy(tmp_path)
    with sqlite3.connect(db) as conn:
        changed = conn.execute(
            damage, {"run": demo.runs[0]["run_id"], "suspended": demo.runs[3]["run_id"]}
        ).rowcount
        if "payload = CAST" in damage:
            # Damage to meaning, not bytes: as a buggy writer would leave it, checksum and all.
            _backfill_checksums(conn)
    conn.close()
    assert changed >= 1
    done = run_cli("--db", str(db), "check")
    assert done.code == 1
    assert finding in done.out
    assert "finding(s)" in done.out.splitlines()[-1]
    data = run_cli("--db", str(db), "--json", "check")
    assert data.code == 1
    assert '"ok":false' in data.out


def test_one_shot_runs_are_checked_too(tmp_path: Path) -> None:
    """A run with no session is listed by no session, but the backend knows it."""
    db = tmp_path / "one-shot.db"

    async def write() -> None:
        async with await SQLiteStore.open(db) as store:
            run = RecordBuilder(RunStart(run_id="solo", agent_id="a", session_id="", started_at=AT))
            await store.start_one_shot_run(run.one_shot_start())
            note = run.record("run_phase_changed", b'{"phase":"planning"}', event_key="p", at=AT)
            await store.append_run_record(note)

    asyncio.run(write())
    assert run_cli("--db", str(db), "check").code == 0
    _sql(db, "UPDATE records SET payload = CAST('{\"phase\":1}' AS BLOB) WHERE seq = 2")
    done = run_cli("--db", str(db), "check")
    assert done.code == 1
    assert "of run 'solo'" in done.out


def test_a_database_behind_the_schema_is_refused_clearly(tmp_path: Path) -> None:
    """Not SQLite's "no such column": how many migrations are pending, and how to apply them."""
    from agentledger.errors import ValidationError
    from agentledger.storage.sqlite import LATEST_VERSION, check_invariants
    from agentledger.storage.sqlite.schema import migrate

    db = tmp_path / "behind.db"
    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, upto=LATEST_VERSION - 2)
    conn.close()
    before = db.read_bytes()
    done = run_cli("--db", str(db), "check")
    assert done.code != 0
    assert "2 migrations pending" in done.err
    assert f"run `agentledger migrate --db {db}`" in done.err
    assert "no such column" not in done.err + done.out
    with pytest.raises(ValidationError) as behind:
        check_invariants(db)
    assert (behind.value.field, behind.value.got) == ("schema_version", LATEST_VERSION - 2)
    assert db.read_bytes() == before  # reading never migrates

    async def migrate_with_a_writer() -> None:
        async with await SQLiteStore.open(db):
            pass

    asyncio.run(migrate_with_a_writer())
    assert check_invariants(db) == []
    assert run_cli("--db", str(db), "check").code == 0
