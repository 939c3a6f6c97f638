"""`agentledger search TEXT`: the demo's messages found by their words, as text and JSON."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from tests.cli.conftest import Demo, run_cli


def test_search_prints_the_messages_holding_the_words(demo: Demo) -> None:
    done = run_cli("--db", str(demo.db), "search", "WEATHER", "tokyo")
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].split() == ["TIME", "SESSION", "RUN", "RECORD/MSG", "ROLE", "MATCH"]
    assert len(lines) == 3  # the question, then the answer's tool calls (newest first)
    assert "user" in lines[2]
    assert "What's the **weather** in Paris and **Tokyo**?" in lines[2]
    assert demo.session in lines[1]


def test_search_json_pages_with_a_cursor(demo: Demo) -> None:
    first = run_cli("--db", str(demo.db), "search", "the", "--limit", "1", "--json").json()
    assert len(first["hits"]) == 1
    assert set(first["hits"][0]) == {
        "session_id", "run_id", "record_id", "message_index", "role", "timestamp", "snippet"
    }  # fmt: skip
    assert (first["left_out"], first["complete"]) == (0, True)
    cursor = first["next_cursor"]
    second = run_cli(
        "--db", str(demo.db), "search", "the", "--limit", "1", "--cursor", cursor, "--json"
    ).json()
    assert second["hits"] != first["hits"]


def test_search_filters_and_says_when_nothing_is_found(demo: Demo) -> None:
    args = ("--db", str(demo.db), "search", "weather")
    assert run_cli(*args, "--session", demo.session, "--json").json()["hits"]
    assert run_cli(*args, "--label", "tenant=nobody", "--json").json()["hits"] == []
    done = run_cli(*args, "--label", "tenant=nobody")
    assert done.out == "no message holds every word searched for\n"
    refused = run_cli("--db", str(demo.db), "search", "?!")
    assert refused.code == 1
    assert "at least one word" in refused.err
    bad = run_cli(*args, "--label", "nolabel")
    assert bad.code == 2


def test_migrate_builds_the_search_index_of_older_records(demo: Demo, tmp_path: Path) -> None:
    """A database from before search: `migrate` indexes its records and says how far it got."""
    db = demo.copy(tmp_path)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        for table in ("search_words", "search_indexed", "search_left_out", "search_backfill"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("DELETE FROM _agentledger_migrations WHERE version IN (17, 19, 20)")
    finally:
        conn.close()
    done = run_cli("--db", str(db), "migrate")
    assert done.code == 0, done.err
    assert "applied migrations 17, 19, 20;" in done.out
    assert re.fullmatch(r"search index: \d+ older records indexed\n", done.err)
    found = run_cli("--db", str(db), "search", "weather", "--json").json()
    assert len(found["hits"]) == 2
