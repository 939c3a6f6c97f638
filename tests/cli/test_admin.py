"""The commands that write: `session end|purge`, `repair`, and `demo` into ./agentledger.db."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import Demo, run_cli, run_process

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_demo_twice_then_end_and_purge(tmp_path: Path) -> None:
    """The demo (a real process) runs twice into ./agentledger.db: two sessions; then
    [D2] [D3] end and purge one: it is gone, and purging an active session is refused."""
    first_demo = run_process("demo", cwd=tmp_path)
    assert first_demo.returncode == 0, first_demo.stderr
    assert "→ get_weather(city='Paris')" in first_demo.stdout
    assert "agentledger runs demo-" in first_demo.stdout
    assert run_process("demo", cwd=tmp_path).returncode == 0
    db = str(tmp_path / "agentledger.db")
    first, second = (s["id"] for s in run_cli("--db", db, "--json", "sessions").json()["sessions"])
    assert first != second
    refused = run_cli("--db", db, "session", "purge", first)
    assert refused.code == 1
    assert refused.err == f"agentledger: error: session {first!r} is still active; end it first\n"
    ended = run_cli("--db", db, "session", "end", first)
    assert ended.code == 0
    assert ended.out.startswith(f"session {first} ended at 20")
    again = run_cli("--db", db, "--json", "session", "end", first).json()
    assert again["status"] == "ended"
    assert again["ended_at"].endswith("Z")
    runs = run_cli("--db", db, "--json", "runs", first).json()
    purged = run_cli("--db", db, "session", "purge", first)
    assert purged.code == 0, purged.err
    # [D7] the receipt: what was deleted, and its digest; a repeat prints the same one.
    head, digest = purged.out.splitlines()
    assert re.fullmatch(
        rf"session {first} purged at 20\S+Z: (\d+) runs, (\d+) records, (\d+) checkpoints, "
        r"(\d+) bytes, (\d+) search index entries",
        head,
    ), head
    assert re.fullmatch(r"digest sha256:[0-9a-f]{64}", digest)
    receipt = run_cli("--db", db, "--json", "session", "purge", first).json()
    assert set(receipt) == {
        "session_id", "runs", "records", "checkpoints", "messages", "bytes", "digest",
        "purged_at", "cascaded", "derived",
        "search_entries",
    }  # fmt: skip
    assert (receipt["cascaded"], receipt["derived"]) == ([], [])  # no copies elsewhere
    assert receipt["session_id"] == first
    assert receipt["digest"] == digest.removeprefix("digest ")
    assert head == (
        f"session {first} purged at {receipt['purged_at']}: {receipt['runs']} runs, "
        f"{receipt['records']} records, {receipt['checkpoints']} checkpoints, "
        f"{receipt['bytes']} bytes, {receipt['search_entries']} search index entries"
    )
    assert receipt["search_entries"] > 0  # the demo's messages were indexed
    assert receipt["runs"] == len(runs["runs"]) > 0
    assert receipt["records"] > receipt["runs"]
    assert run_cli("--db", db, "session", "purge", first).out == purged.out
    assert [s["id"] for s in run_cli("--db", db, "--json", "sessions").json()["sessions"]] == [
        second
    ]
    gone = run_cli("--db", db, "runs", first)
    assert gone.code == 1
    assert "purged" in gone.err
    assert run_cli("--db", db, "check").code == 0


def _crashed_run(db: Path, *, canceled: bool) -> None:
    """A run whose workflow died: started (and perhaps asked to cancel), never closed."""

    async def write() -> None:
        async with await SQLiteStore.open(db) as store:
            await store.create_session("s", created_at=AT)
            run = RecordBuilder(RunStart(run_id="r", agent_id="a", session_id="s", started_at=AT))
            await store.start_root_run(run.root_start())
            at = AT + timedelta(seconds=5)
            note = run.record("run_phase_changed", b'{"phase":"planning"}', event_key="p", at=at)
            await store.append_run_record(note)
            if canceled:
                await store.record_run_cancellation(run.cancellation("user left", at=at))

    asyncio.run(write())


def test_repair_refuses_a_running_run_without_its_engine(tmp_path: Path) -> None:
    db = tmp_path / "crashed.db"
    _crashed_run(db, canceled=False)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    done = run_cli("--db", str(db), "repair", "r")
    assert done.code == 1
    assert "--workflow-gone" in done.err
    assert done.err.count("\n") == 1
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_repair_closes_a_run_whose_workflow_is_gone(tmp_path: Path) -> None:
    """[E2] failed (workflow_lost) at its last record's time; a second repair writes nothing."""
    db = tmp_path / "crashed.db"
    _crashed_run(db, canceled=False)
    first = run_cli("--db", str(db), "--json", "repair", "r", "--workflow-gone").json()
    assert (first["status"], first["repaired"]) == ("failed", True)
    record = first["record"]
    assert record["type"] == "run_completed"
    assert record["timestamp"] == "2026-01-01T00:00:05.000Z"
    assert record["payload"]["failure"]["kind"] == "workflow_lost"
    assert first["event"]["type"] == "run_completed"
    second = run_cli("--db", str(db), "--json", "repair", "r", "--workflow-gone").json()
    assert (second["status"], second["repaired"]) == ("failed", False)
    assert second["record"] == record
    text = run_cli("--db", str(db), "repair", "r")
    assert text.out.startswith("run r is failed; its lifecycle checks out, nothing written")
    assert run_cli("--db", str(db), "check").code == 0


def test_repair_of_a_canceled_run_keeps_its_reason(tmp_path: Path) -> None:
    db = tmp_path / "crashed.db"
    _crashed_run(db, canceled=True)
    done = run_cli("--db", str(db), "repair", "r", "--workflow-gone")
    assert done.code == 0
    assert done.out.startswith("run r was running; closed it as canceled")
    assert '"cancellation":{"reason":"user left"}' in done.out


def test_repair_of_a_closed_run_checks_and_writes_nothing(demo: Demo, tmp_path: Path) -> None:
    db = demo.copy(tmp_path)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for run in demo.runs:
        done = run_cli("--db", str(db), "repair", run["run_id"])
        assert done.code == 0, done.err
        assert f"is {run['status']}; its lifecycle checks out" in done.out
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_sessions_status_filter(demo: Demo, tmp_path: Path) -> None:
    db = str(demo.copy(tmp_path))
    assert run_cli("--db", db, "session", "end", demo.session).code == 0
    for status, expected in (("active", []), ("ended", [demo.session])):
        listed = run_cli("--db", db, "--json", "sessions", "--status", status).json()
        assert [s["id"] for s in listed["sessions"]] == expected
    assert run_cli("--db", db, "sessions", "--status", "purged").code == 2


def test_purge_of_a_tombstone_older_than_receipts(tmp_path: Path) -> None:
    """[D7] a tombstone migrated from before receipts (NULL receipt): nothing invented."""
    db = tmp_path / "old.db"

    async def purge() -> None:
        async with await SQLiteStore.open(db) as store:
            await store.create_session("old", created_at=AT)
            await store.end_session("old", ended_at=AT)
            await store.purge_session("old")

    asyncio.run(purge())
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("UPDATE session_tombstones SET receipt = NULL")
    text = run_cli("--db", str(db), "session", "purge", "old")
    assert text.code == 0, text.err
    assert text.out == "session old purged (before receipts were kept: what it held is unknown)\n"
    assert run_cli("--db", str(db), "--json", "session", "purge", "old").json() == {
        "session_id": "old", "runs": None, "records": None, "checkpoints": None,
        "messages": None, "bytes": None, "digest": "", "purged_at": None,
        "cascaded": [], "derived": [],
        "search_entries": None,
    }  # fmt: skip
