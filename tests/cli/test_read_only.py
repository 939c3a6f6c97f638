"""Read commands never write: a read-only file can be read; a file that is not an
agentledger database is refused without changing it; a damaged one is named."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
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


@contextlib.contextmanager
def _read_only_directory(
    source: Path, view: Path, *, mount: bool = True
) -> Iterator[tuple[Path, str]]:
    """``source`` as a directory nobody can write: (that directory, how it was made).

    Root ignores permissions, so as root: a read-only bind mount at ``view`` (unless not
    ``mount``), else ``chattr +i`` on ``source``; as anyone else, ``chmod 0555``.
    """
    if os.geteuid() != 0:
        source.chmod(0o555)
        try:
            yield source, "chmod 0555"
        finally:
            source.chmod(0o755)
        return
    view.mkdir()
    mounted = subprocess.run(
        ["mount", "--bind", str(source), str(view)] if mount else ["false"], capture_output=True
    )
    if mounted.returncode == 0:
        try:
            remounted = subprocess.run(
                ["mount", "-o", "remount,ro,bind", str(view)], capture_output=True
            )
            if remounted.returncode == 0:
                yield view, "a read-only bind mount"
                return
        finally:
            subprocess.run(["umount", str(view)], check=True)
    if subprocess.run(["chattr", "+i", str(source)], capture_output=True).returncode != 0:
        pytest.skip("root, and neither a read-only bind mount nor chattr +i is permitted here")
    try:
        yield source, "chattr +i"
    finally:
        subprocess.run(["chattr", "-i", str(source)], check=True)


@pytest.mark.parametrize("mount", [True, False], ids=["mount-or-chmod", "chattr-or-chmod"])
def test_a_database_in_a_read_only_directory_can_be_read(
    demo: Demo, tmp_path: Path, mount: bool
) -> None:
    source = tmp_path / "data"
    source.mkdir()
    shutil.copy(demo.db, source / "ledger.db")
    before = _digest(source / "ledger.db")
    run_id = demo.runs[-1]["run_id"]
    with _read_only_directory(source, tmp_path / "view", mount=mount) as (directory, how):
        db = str(directory / "ledger.db")
        with pytest.raises(OSError, match=r"Read-only|Permission|not permitted"):
            (directory / "probe").touch()
        sessions = run_cli("--db", db, "--json", "sessions")
        assert sessions.code == 0, (how, sessions.err)
        assert [s["id"] for s in sessions.json()["sessions"]] == [demo.session]
        runs = run_cli("--db", db, "runs", demo.session)
        assert runs.code == 0, (how, runs.err)
        assert run_id in runs.out
        transcript = run_cli("--db", db, "transcript", run_id)
        assert transcript.code == 0, (how, transcript.err)
        assert transcript.out.strip()
        checked = run_cli("--db", db, "check")
        assert checked.code == 0, (how, checked.err)
        assert sorted(p.name for p in directory.iterdir()) == ["ledger.db"]
    assert _digest(source / "ledger.db") == before


def test_a_read_only_directory_with_a_log_left_behind_is_refused_saying_why(
    demo: Demo, tmp_path: Path
) -> None:
    source = tmp_path / "data"
    source.mkdir()
    shutil.copy(demo.db, source / "ledger.db")
    (source / "ledger.db-wal").write_bytes(b"\0" * 32)  # transactions not yet checkpointed
    with _read_only_directory(source, tmp_path / "view") as (directory, _):
        done = run_cli("--db", str(directory / "ledger.db"), "sessions")
    assert done.code == 1
    assert "its directory is read-only" in done.err, done.err
    assert "-wal holds transactions not yet in the database" in done.err, done.err
