"""check_invariants on PostgreSQL: the SQLite checker's twin, silent on a sound database
and specific about each kind of damage."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from agentledger.storage import Checkpoint
from agentledger.storage.conformance import World
from agentledger.storage.conformance._messages import submission
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres.check import check_invariants, stored_run_ids
from tests.storage.postgres.server import create_database, drop_database


async def _populate(dsn: str) -> None:
    async with await PostgresStore.open(dsn) as store:
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


@pytest.fixture
def database(postgres_dsn: str) -> Iterator[str]:
    dsn = create_database(postgres_dsn, prefix="agentledger_check")
    try:
        asyncio.run(_populate(dsn))
        yield dsn
    finally:
        drop_database(dsn)


async def test_a_sound_database_has_no_violations(database: str) -> None:
    assert await check_invariants(database) == []
    assert await stored_run_ids(database) == ["chk-done", "chk-waiting", "chk-parent", "chk-child"]


R = "agentledger_records"
RUNS = "agentledger_runs"
MESSAGES = "agentledger_session_messages"


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (
            f"UPDATE {MESSAGES} SET started = 1 WHERE run_id = 'chk-m1'",
            "message marked started without its run: 'chk-m1'",
        ),
        (
            f"UPDATE {MESSAGES} SET pos = 3 WHERE run_id = 'chk-m1'",
            "not numbered 1, 2, ... without gaps: 'chk-s'",
        ),
        (
            f"UPDATE {MESSAGES} SET session_id = 'chk-gone' WHERE run_id = 'chk-m1'",
            "message of a missing or purged session: 'chk-m1'",
        ),
        (
            f"DELETE FROM {R} WHERE run_id = 'chk-done' AND type = 'run_completed'",
            "completed with 0 run_completed records",
        ),
        (f"UPDATE {RUNS} SET status = 'running' WHERE run_id = 'chk-done'", "running but has 1"),
        (
            f"UPDATE {RUNS} SET checkpoint_id = NULL, checkpoint_data = NULL "
            "WHERE run_id = 'chk-waiting'",
            "suspended with checkpoint=False",
        ),
        (f"DELETE FROM {R} WHERE run_id = 'chk-done' AND seq = 2", "without gaps"),
        (
            f"UPDATE {RUNS} SET terminal_key = 'elsewhere' WHERE run_id = 'chk-done'",
            "terminal_key 'elsewhere' names no run_completed record",
        ),
        (
            f"UPDATE {R} SET agent_id = 'intruder' WHERE run_id = 'chk-done' AND seq = 2",
            "another agent or session",
        ),
        ("DELETE FROM agentledger_sessions WHERE id = 'chk-s'", "its session 'chk-s' is missing"),
        ("INSERT INTO agentledger_purged_sessions VALUES ('chk-s')", "run of a purged session"),
        (
            f"UPDATE {R} SET payload = convert_to('{{\"status\": 1}}', 'UTF8') "
            "WHERE run_id = 'chk-done' AND type = 'run_completed'",
            "corrupt record '4' of run 'chk-done'",
        ),
        (
            "UPDATE agentledger_session_labels SET value = 'other'",
            "label index row disagreeing with its session: session 'chk-s', label 'tenant'",
        ),
        (
            "UPDATE agentledger_session_labels SET status = 'ended'",
            "label index row disagreeing with its session: session 'chk-s'",
        ),
        (
            "INSERT INTO agentledger_session_labels "
            "VALUES ('chk-ghost', 'k', 'v', 'active', now())",
            "label index row disagreeing with its session: session 'chk-ghost', label 'k'",
        ),
        (
            "DELETE FROM agentledger_session_labels",
            "session label missing from the label index: session 'chk-s', label 'tenant'",
        ),
        ("DELETE FROM _agentledger_migrations", "no agentledger migrations"),
    ],
)
async def test_each_kind_of_damage_is_reported(database: str, damage: str, expected: str) -> None:
    async with await psycopg.AsyncConnection.connect(database, autocommit=True) as conn:
        await conn.execute(damage)  # type: ignore[arg-type]
    problems = await check_invariants(database)
    assert any(expected in p for p in problems), problems
