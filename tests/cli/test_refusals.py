"""What a new user meets first: each refusal is one line saying what is wrong in words.

A missing directory for an archive, a restore onto a session the store has, a
purged session read back, a record type the run never wrote, a malformed
DSN, a database that needs migrating, and any of them under ``--json``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore, schema
from tests.cli.conftest import Demo, run_cli
from tests.storage.archived import ended_session


def _ended(db: Path) -> str:
    async def write() -> str:
        async with await SQLiteStore.open(db) as store:
            return await ended_session(World(store, namespace="cli"), "first-hour")

    return asyncio.run(write())


def test_archive_into_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    sid = _ended(db)
    out = tmp_path / "nowhere" / "x.alarchive"
    done = run_cli("--db", str(db), "archive", sid, "--out", str(out))
    assert done.code == 1
    assert done.err == (
        f"agentledger: error: --out {out}: there is no directory {out.parent} (create it first)\n"
    )
    assert not out.parent.exists()


def test_restore_onto_a_session_the_store_has_says_so(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    sid = _ended(db)
    out = tmp_path / "s.alarchive"
    assert run_cli("--db", str(db), "archive", sid, "--out", str(out)).code == 0
    done = run_cli("--db", str(db), "restore", str(out))
    assert done.code == 1
    assert done.err == (
        f"agentledger: error: {db} already holds session {sid}: a restore only recreates a "
        "session the store never held (restore into another store, with --db)\n"
    )


def test_reading_a_purged_session_says_it_was_purged(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    sid = _ended(db)
    run_id = run_cli("--db", str(db), "--json", "runs", sid).json()["runs"][0]["run_id"]
    assert run_cli("--db", str(db), "session", "purge", sid).code == 0
    gone = run_cli("--db", str(db), "runs", sid)
    assert gone.code == 1
    assert gone.err == (
        f"agentledger: error: session {sid} was purged: its runs, records and checkpoints are "
        f"deleted (`agentledger session purge {sid}` prints its receipt again)\n"
    )
    for command in ("records", "transcript", "tail"):
        done = run_cli("--db", str(db), command, run_id)
        assert done.code == 1
        assert done.err.startswith(
            f"agentledger: error: run {run_id} belonged to session {sid}, which was purged: "
        ), done.err
        assert "cannot be used again" not in done.err


def test_records_of_a_type_the_run_never_wrote_names_the_types_it_has(demo: Demo) -> None:
    run_id = demo.runs[0]["run_id"]
    done = run_cli("--db", str(demo.db), "records", run_id, "--type", "nope")
    assert done.code == 0
    assert len(done.out.splitlines()) == 1  # the header alone
    (line,) = done.err.splitlines()
    assert line.startswith(f"agentledger: note: run {run_id} has no record of type 'nope'; ")
    assert "its types: run_started, prompt_rendered, " in line
    found = run_cli("--db", str(demo.db), "records", run_id, "--type", "run_started")
    assert found.err == ""


def test_sessions_json_has_the_run_count_the_table_shows(demo: Demo) -> None:
    (session,) = run_cli("--db", str(demo.db), "--json", "sessions").json()["sessions"]
    assert session["runs"] == len(demo.runs) == 6
    table = run_cli("--db", str(demo.db), "sessions").out.splitlines()[1]
    assert table.split()[-1] == str(session["runs"])


def test_refusals_under_json_are_a_json_error_object(demo: Demo, tmp_path: Path) -> None:
    done = run_cli("--db", str(demo.db), "--json", "records", "run-nope")
    assert done.code == 1
    assert done.out == ""
    assert json.loads(done.err) == {
        "error": {
            "type": "RunNotFoundError",
            "message": "run 'run-nope' not found",
            "fields": {"kind": "run", "id": "run-nope", "run_id": "run-nope"},
        }
    }
    missing = run_cli("runs", "s", "--db", str(tmp_path / "none.db"), "--json")
    error = json.loads(missing.err)["error"]
    assert (error["type"], error["fields"]["field"]) == ("ValidationError", "--db")


def test_a_malformed_dsn_is_one_clean_line() -> None:
    done = run_cli("--db", "host=127.0.0.1 port=1 dbname", "sessions")
    assert done.code == 1
    assert done.err == (
        'agentledger: error: not a valid PostgreSQL DSN (missing "=" after "dbname" in '
        "connection info string): host=127.0.0.1 port=1 dbname\n"
    )


def test_demo_help_offers_only_what_demo_takes() -> None:
    text = " ".join(run_cli("demo", "--help").out.split())
    assert "--db, --store TARGET the SQLite file" in text
    assert "postgresql" not in text
    assert "http" not in text
    refused = run_cli("--db", "postgresql://u@127.0.0.1/x", "demo")
    assert refused.err == (
        "agentledger: error: the demo writes a SQLite file, not postgresql://u@127.0.0.1/x\n"
    )


def test_migrate_a_sqlite_file_behind_this_code(tmp_path: Path) -> None:
    """A file one migration behind: readers name `agentledger migrate`; it applies the
    migration; a second run changes nothing."""
    db = tmp_path / "old.db"
    latest = schema.LATEST_VERSION
    conn = sqlite3.connect(db, isolation_level=None)
    schema.migrate(conn, upto=latest - 1)
    conn.close()
    behind = run_cli("--db", str(db), "sessions")
    assert behind.code == 1
    assert behind.err == (
        f"agentledger: error: {db} needs migrating: 1 migration pending (schema version "
        f"{latest - 1}, this agentledger's is {latest}); run `agentledger migrate --db {db}`\n"
    )
    done = run_cli("migrate", "--db", str(db))
    assert done.code == 0, done.err
    assert done.out == f"{db}: applied migration {latest}; schema version {latest}\n"
    assert run_cli("--db", str(db), "sessions").code == 0
    again = run_cli("--json", "migrate", "--db", str(db)).json()
    assert again == {"db": str(db), "applied": [], "schema_version": latest}
    missing = run_cli("migrate", "--db", str(tmp_path / "none.db"))
    assert missing.code == 1
    assert re.fullmatch(r"agentledger: error: no database at \S+none\.db .*\n", missing.err)
    assert not (tmp_path / "none.db").exists()


def test_a_sqlite_file_from_a_newer_agentledger_says_upgrade(tmp_path: Path) -> None:
    """Not "-1 migration pending ... run agentledger migrate": readers and `migrate` alike
    say a newer agentledger wrote it, and leave it as it is."""
    db = tmp_path / "newer.db"
    latest = schema.LATEST_VERSION
    conn = sqlite3.connect(db, isolation_level=None)
    schema.migrate(conn)
    conn.execute(
        "INSERT INTO _agentledger_migrations (version, name, applied_at) VALUES (?, 'next', 0)",
        (latest + 1,),
    )
    conn.close()
    before = db.read_bytes()
    expected = (
        f"agentledger: error: {db}: this database was written by a newer agentledger "
        f"(schema {latest + 1}, this one knows {latest}); upgrade agentledger\n"
    )
    for command in (["sessions"], ["migrate"]):
        refused = run_cli("--db", str(db), *command)
        assert refused.code == 1
        assert refused.err == expected, command
    assert db.read_bytes() == before


def test_a_label_without_key_and_value_is_refused_by_each_command_that_filters(
    tmp_path: Path,
) -> None:
    """`--label` takes KEY=VALUE on `sessions`, `search` and `usage` alike: anything else
    is a usage error naming the option, before any store is opened."""
    db = tmp_path / "none.db"
    for command in (["sessions"], ["search", "refund"], ["usage"]):
        for given in ("tenant", "=acme"):
            done = run_cli("--db", str(db), *command, "--label", given)
            assert done.code == 2, (command, given, done)
            assert f"--label: expected KEY=VALUE, got {given!r}" in done.err
    assert not db.exists()
