"""Read commands never write: a read-only file can be read; a file that is not an
agentledger database is refused without changing it; a damaged one is named."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tests.cli.conftest import Demo, run_cli

READS = (
    ["sessions"],
    ["--json", "sessions"],
    ["check"],
)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reads_leave_the_file_unchanged(demo: Demo, tmp_path: Path) -> None:
    db = demo.copy(tmp_path)
    before = _digest(db)
    run_id = demo.runs[-1]["run_id"]
    for args in (
        ["sessions"],
        ["runs", demo.session],
        ["records", run_id, "--full"],
        ["transcript", run_id],
        ["prompts", run_id],
        ["tail", run_id],
        ["check"],
    ):
        assert run_cli("--db", str(db), *args).code == 0, args
        assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db"], args  # no -wal, -shm
    assert _digest(db) == before


def test_a_read_only_file_can_be_read(demo: Demo, tmp_path: Path) -> None:
    db = demo.copy(tmp_path)
    db.chmod(0o444)
    done = run_cli("--db", str(db), "runs", demo.session)
    assert done.code == 0, done.err
    assert demo.runs[0]["run_id"] in done.out
    assert run_cli("--db", str(db), "check").code == 0


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b""), "is not an agentledger database"),
        (_foreign, "is not an agentledger database"),
        (lambda p: p.write_text("hello, not a database\n"), "expected an SQLite database file"),
    ],
    ids=["empty", "foreign-sqlite", "text"],
)
@pytest.mark.parametrize("command", [["sessions"], ["check"], ["session", "end", "s-1"]])
def test_a_file_that_is_not_ours_is_refused_unchanged(
    tmp_path: Path, make: object, message: str, command: list[str]
) -> None:
    """Reading a 0-byte file used to write a schema into it; now nothing is written."""
    db = tmp_path / "other.db"
    make(db)  # type: ignore[operator]
    before = _digest(db)
    done = run_cli("--db", str(db), *command)
    assert done.code == 1
    assert message in done.err
    assert done.err.count("\n") == 1
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_a_truncated_file_is_named_as_damaged(demo: Demo, tmp_path: Path) -> None:
    """Not `corrupt record '' of run ''`: the file, and that it is damaged."""
    db = tmp_path / "truncated.db"
    data = demo.db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    for args in (["sessions"], ["check"], ["runs", demo.session]):
        done = run_cli("--db", str(db), *args)
        assert done.code == 1
        assert done.err.startswith(f"agentledger: error: {db}: the database is damaged")
        assert "record ''" not in done.err


def test_a_missing_file_is_not_created(tmp_path: Path) -> None:
    for args in (["sessions"], ["session", "end", "s"], ["check"]):
        done = run_cli("--db", str(tmp_path / "nope.db"), *args)
        assert done.code == 1
        assert "no database at" in done.err
    assert list(tmp_path.iterdir()) == []
