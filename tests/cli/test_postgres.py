"""The read commands, `check` and `tail` on PostgreSQL: the same views from a DSN."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest

from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
from agentledger.storage.postgres import PostgresStore, migrations
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import decode_messages
from tests.cli.conftest import run_cli, run_process
from tests.storage.postgres.server import create_database, drop_database

SESSION = "pg-session"
LATEST = migrations.SCHEMA_VERSION


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Current weather in a city."""
    return {"city": city, "temp_c": 18}


async def _populate(dsn: str) -> str:
    store = await PostgresStore.open(dsn)
    runtime = Runtime(store)
    try:
        model = ScriptedModel(
            [tool_calls(("call_1", "get_weather", {"city": "Paris"})), reply("18°C.")]
        )
        runtime.register_model("model", model)
        runtime.register_agent(Agent("weather", ModelPlanner("model"), tools=[get_weather]))
        await store.create_session(SESSION, created_at=datetime(2026, 1, 1, tzinfo=UTC))
        out = await runtime.agent_client("weather").run(SESSION, [user_message("Paris?")])
        return out.run_id
    finally:
        await runtime.close()
        await store.close()


@pytest.fixture(scope="module")
def ledger(postgres_dsn: str) -> Iterator[tuple[str, str]]:
    """A database of its own (other tests' data would be in the listings): DSN and run id."""
    dsn = create_database(postgres_dsn, prefix="agentledger_cli")
    try:
        yield dsn, asyncio.run(_populate(dsn))
    finally:
        drop_database(dsn)


def test_sessions_runs_records_transcript(ledger: tuple[str, str]) -> None:
    dsn, run_id = ledger
    (session,) = run_cli("--db", dsn, "--json", "sessions").json()["sessions"]
    assert session["id"] == SESSION
    assert session["created_at"] == "2026-01-01T00:00:00.000Z"
    runs = run_cli("--db", dsn, "--json", "runs", SESSION).json()["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "completed")]
    tree = run_cli("--db", dsn, "runs", SESSION)
    assert f"└── {run_id}  weather  completed" in tree.out
    records = run_cli("--db", dsn, "--json", "records", run_id).json()["records"]
    assert records[0]["type"] == "run_started"
    assert records[-1]["type"] == "run_completed"
    page = run_cli("--db", dsn, "--json", "records", run_id, "--limit", "2").json()
    rest = run_cli(
        "--db", dsn, "--json", "records", run_id, "--cursor", page["next_cursor"]
    ).json()  # fmt: skip
    assert page["records"] + rest["records"] == records
    tools = run_cli("--db", dsn, "--json", "records", run_id, "--type", "tool_result_received")
    assert len(tools.json()["records"]) == 1
    done = run_cli("--db", dsn, "--json", "transcript", run_id)
    assert len(decode_messages(done.out.strip().encode())) == 4
    assert "→ get_weather(" in run_cli("--db", dsn, "transcript", run_id).out
    tailed = run_cli("--db", dsn, "--json", "tail", run_id)
    assert [json.loads(line)["id"] for line in tailed.out.splitlines()] == [
        r["id"] for r in records
    ]


@pytest.mark.parametrize(
    ("damage", "finding"),
    [
        ("UPDATE agentledger_records SET event_key = event_key || '-edited'", "checksum mismatch"),
        (
            "UPDATE agentledger_records SET payload = '\\x7B2278223AFFFE7D'::bytea",
            "checksum mismatch",
        ),
        ("DELETE FROM agentledger_records", "sequence gap"),
    ],
    ids=["event-key", "payload-bytes", "missing-last-record"],
)
def test_check_on_postgres_reports_what_the_read_paths_report(
    ledger: tuple[str, str], damage: str, finding: str
) -> None:
    """[J1] the damage the read paths refuse is a finding of `check`, naming the record."""
    dsn, run_id = ledger
    with psycopg.connect(dsn, autocommit=True) as conn:
        where = " WHERE run_id = %s AND seq = (SELECT max(seq) FROM agentledger_records"
        where += " WHERE run_id = %s)"
        cur = conn.execute(f"SELECT * FROM agentledger_records {where}", (run_id, run_id))
        columns = [c.name for c in cur.description or ()]
        saved = cur.fetchone()
        assert saved is not None
        conn.execute(damage + where, (run_id, run_id))
    try:
        done = run_cli("--db", dsn, "check")
        assert done.code == 1
        assert finding in done.out
        seq = saved[columns.index("seq")]
        assert f"'{seq}'" in done.out
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # the row put back as it was: no trigger counts it as a new write
            conn.execute("SET session_replication_role = replica")
            conn.execute(
                "DELETE FROM agentledger_records WHERE run_id = %s AND seq = %s",
                (run_id, saved[columns.index("seq")]),
            )
            names = ", ".join(columns)
            marks = ", ".join(["%s"] * len(columns))
            conn.execute(f"INSERT INTO agentledger_records ({names}) VALUES ({marks})", saved)
    assert run_cli("--db", dsn, "check").code == 0


def test_check_on_postgres(ledger: tuple[str, str], postgres_dsn: str) -> None:
    """No findings on a sound database; damage in a copy is found by both layers."""
    dsn, run_id = ledger
    clean = run_cli("--db", dsn, "--json", "check").json()
    assert clean == {
        "target": dsn,
        "sessions": 1,
        "runs": 1,
        "records": clean["records"],
        "findings": [],
        "ok": True,
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE agentledger_records SET payload = %s WHERE run_id = %s AND type = %s",
            (b'{"status":"bogus"}', run_id, "run_completed"),
        )
    try:
        done = run_cli("--db", dsn, "check")
        assert done.code == 1
        findings = done.out.splitlines()[:-1]
        assert len(findings) >= 2  # the table audit and the protocol audit both see it
        # the rewrite also changed the bytes the run and session hold: their counters differ
        damage = [f for f in findings if not f.startswith("usage counters of ")]
        assert len(damage) >= 2, findings  # the table audit and the protocol audit both see it
        assert all("corrupt record" in f or "run_completed" in f for f in damage), findings
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE agentledger_records SET payload = %s WHERE run_id = %s AND type = %s",
                (b'{"status":"success","phase":"completed"}', run_id, "run_completed"),
            )
    assert run_cli("--db", dsn, "check").code == 0


def test_the_cli_never_migrates_a_database(postgres_dsn: str) -> None:
    """A database without the schema is refused by every command, and left empty."""
    dsn = create_database(postgres_dsn, prefix="agentledger_cli_empty")
    try:
        for args in (["sessions"], ["check"], ["session", "end", "s"]):
            done = run_cli("--db", dsn, *args)
            assert done.code == 1
            assert done.err.count("\n") == 1
        with psycopg.connect(dsn) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert tables == (0,)
    finally:
        drop_database(dsn)


def test_repair_and_session_admin_on_postgres(ledger: tuple[str, str]) -> None:
    """Runs last in this module: it ends and purges the module's session."""
    dsn, run_id = ledger
    checked = run_cli("--db", dsn, "repair", run_id)
    assert checked.code == 0, checked.err
    assert f"run {run_id} is completed; its lifecycle checks out" in checked.out
    assert run_cli("--db", dsn, "session", "purge", SESSION).code == 1
    ended = run_cli("--db", dsn, "--json", "session", "end", SESSION).json()
    assert ended["status"] == "ended"
    assert run_cli("--db", dsn, "session", "purge", SESSION).code == 0
    assert run_cli("--db", dsn, "--json", "sessions").json()["sessions"] == []
    assert run_cli("--db", dsn, "check").code == 0


def test_a_fresh_database_is_refused_naming_migrate_which_migrates_it(postgres_dsn: str) -> None:
    """Only `migrate` (and workers, serve) write the schema; every read names the command."""
    dsn = create_database(postgres_dsn, prefix="agentledger_cli_fresh")
    try:
        fresh = run_cli("--db", dsn, "sessions")
        assert fresh.code == 1
        assert fresh.err == (
            f"agentledger: error: {dsn} needs migrating: {LATEST} migrations pending (schema "
            f"version 0, this agentledger's is {LATEST}); run `agentledger migrate --db '{dsn}'`\n"
        )
        done = run_cli("migrate", "--db", dsn, "--json").json()
        assert done["applied"] == list(range(1, done["schema_version"] + 1))
        assert run_cli("--db", dsn, "--json", "sessions").json()["sessions"] == []
        again = run_cli("migrate", "--db", dsn)
        assert again.out == f"{dsn}: already at schema version {done['schema_version']}\n"
    finally:
        drop_database(dsn)


def test_a_database_from_a_newer_agentledger_says_upgrade(postgres_dsn: str) -> None:
    """Not "-1 migration pending ... run agentledger migrate": reads and `migrate` alike
    say a newer agentledger wrote it, and change nothing."""
    dsn = create_database(postgres_dsn, prefix="agentledger_cli_newer")
    try:
        assert run_cli("migrate", "--db", dsn).code == 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {migrations.MIGRATIONS_TABLE} (version, name) VALUES (%s, 'next')",
                (LATEST + 1,),
            )
        expected = (
            f"agentledger: error: {dsn}: this database was written by a newer agentledger "
            f"(schema {LATEST + 1}, this one knows {LATEST}); upgrade agentledger\n"
        )
        for command in (["sessions"], ["migrate"]):
            refused = run_cli("--db", dsn, *command)
            assert refused.code == 1
            assert refused.err == expected, command
    finally:
        drop_database(dsn)


def test_a_missing_database_is_reported_once(postgres_dsn: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(postgres_dsn)
    missing = psycopg.conninfo.make_conninfo(**{**params, "dbname": "agentledger_no_such_db"})
    for args in (["--db", missing, "sessions"], ["migrate", "--db", missing]):
        done = run_process(*args)  # a real process: the pool's log would reach stderr too
        assert done.returncode == 1
        (line,) = done.stderr.splitlines()
        assert line.startswith("agentledger: error: ")
        assert 'database "agentledger_no_such_db" does not exist' in line
