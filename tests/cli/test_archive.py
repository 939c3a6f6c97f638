"""`agentledger archive`, `restore` and `retention` [A1]."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest

from agentledger.cli.archive import parse_cutoff
from agentledger.storage.conformance import World
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import run_cli
from tests.storage.archived import ended_session

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


def _store_with(db: Path, names: list[str]) -> list[str]:
    """A database holding one ended session per name (ended 2026-01-01); their ids."""

    async def write() -> list[str]:
        async with await SQLiteStore.open(db) as store:
            world = World(store, namespace="cli")
            return [await ended_session(world, name) for name in names]

    return asyncio.run(write())


def test_cutoffs() -> None:
    assert parse_cutoff("30d", NOW) == NOW - timedelta(days=30)
    assert parse_cutoff("12h", NOW) == NOW - timedelta(hours=12)
    assert parse_cutoff("2w", NOW) == NOW - timedelta(weeks=2)
    assert parse_cutoff("0s", NOW) == NOW
    assert parse_cutoff("2026-06-01", NOW) == datetime(2026, 6, 1, tzinfo=UTC)
    assert parse_cutoff("2026-06-01T02:00+02:00", NOW) == datetime(2026, 6, 1, tzinfo=UTC)
    with pytest.raises(click.BadParameter):
        parse_cutoff("a month", NOW)
    bad = run_cli("--db", "x.db", "retention", "--ended-before", "soon")
    assert bad.code == 2
    assert "expected an age like 30d" in bad.err


def test_archive_restore_and_refusals(tmp_path: Path) -> None:
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    (sid,) = _store_with(source, ["kept"])
    _store_with(target, [])
    out = tmp_path / "kept.alarchive"
    written = run_cli("--db", str(source), "--json", "archive", sid, "--out", str(out)).json()
    assert (written["session_id"], written["runs"], written["checkpoints"]) == (sid, 4, 1)
    text = run_cli("--db", str(source), "archive", sid, "--out", str(out))
    assert text.out.startswith(f"archived session {sid}: 4 runs, ")
    assert written["session_digest"] in text.out

    checked = run_cli("restore", str(out), "--verify-only")
    assert checked.out.startswith(f"{out} is a valid archive of session {sid}: 4 runs, ")
    assert written["session_digest"] in checked.out
    restored = run_cli("--db", str(target), "--json", "restore", str(out)).json()
    assert restored == written
    runs = run_cli("--db", str(target), "--json", "runs", sid).json()
    assert runs == run_cli("--db", str(source), "--json", "runs", sid).json()

    again = run_cli("--db", str(target), "restore", str(out))
    assert again.code == 1
    assert sid in again.err
    damaged = tmp_path / "damaged.alarchive"
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0x10
    damaged.write_bytes(bytes(data))
    refused = run_cli("--db", str(target), "restore", str(damaged))
    assert refused.code == 1
    assert refused.err == (
        f"agentledger: error: archive {damaged}: checksum mismatch: "
        "the file is damaged or truncated\n"
    )
    active = run_cli("--db", str(target), "archive", "nope", "--out", str(tmp_path / "n"))
    assert active.code == 1
    assert "'nope' not found" in active.err


def test_retention_dry_run_sweep_and_nothing_left(tmp_path: Path) -> None:
    db, directory = tmp_path / "ledger.db", tmp_path / "archives"
    first, second = _store_with(db, ["a", "b"])
    base = ("--db", str(db), "retention", "--ended-before", "30d", "--archive-to", str(directory))
    listed = run_cli("--db", str(db), "--json", "sessions").json()["sessions"]
    ended = {s["id"]: s["ended_at"] for s in listed}
    dry = run_cli(*base, "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.splitlines() == [
        f"would purge {sid} (ended {ended[sid]}), archive {directory / (sid + '.alarchive')}"
        for sid in (first, second)
    ]
    assert not directory.exists()
    swept = run_cli(*base)
    assert swept.code == 0, swept.err
    lines = swept.out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"purged {first}", f"purged {second}"]
    assert all(": 4 runs, " in line and line.endswith(".alarchive") for line in lines)
    assert sorted(p.name for p in directory.iterdir()) == [
        f"{first}.alarchive",
        f"{second}.alarchive",
    ]
    nothing = run_cli(*base, "--json").json()
    assert nothing["sessions"] == []
    assert nothing["dry_run"] is False
    assert run_cli(*base).out.startswith("nothing to do: no session ended before 20")
    for sid in (first, second):
        assert run_cli("restore", str(directory / f"{sid}.alarchive"), "--verify-only").code == 0


def test_restore_can_create_a_new_sqlite_file(tmp_path: Path) -> None:
    """`restore --create`: a new file for the archive; never a foreign or damaged leftover."""
    source = tmp_path / "source.db"
    (sid,) = _store_with(source, ["moved"])
    out = tmp_path / "moved.alarchive"
    assert run_cli("--db", str(source), "archive", sid, "--out", str(out)).code == 0

    new = tmp_path / "new.db"
    without = run_cli("--db", str(new), "restore", str(out))
    assert without.code == 1
    assert "no database at" in without.err
    assert "pass --create" in without.err  # not "run agentledger demo first"
    assert "demo" not in without.err
    assert not new.exists()

    damaged = tmp_path / "damaged.alarchive"
    damaged.write_bytes(out.read_bytes()[:-1])
    refused = run_cli("--db", str(new), "restore", str(damaged), "--create")
    assert refused.code == 1
    assert "truncated" in refused.err or "checksum" in refused.err
    capped = run_cli("--db", str(new), "restore", str(out), "--create", "--max-bytes", "100")
    assert capped.code == 1
    assert "inflates past 100 bytes" in capped.err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("new")) == []

    created = run_cli("--db", str(new), "--json", "restore", str(out), "--create").json()
    assert created["session_id"] == sid
    runs = run_cli("--db", str(new), "--json", "runs", sid).json()
    assert runs == run_cli("--db", str(source), "--json", "runs", sid).json()
    again = run_cli("--db", str(new), "restore", str(out), "--create")  # an agentledger file
    assert again.code == 1
    assert sid in again.err  # already there: refused by the store, not by --create

    foreign = tmp_path / "foreign.db"
    foreign.write_bytes(b"not a database, but someone's file\n")
    kept = run_cli("--db", str(foreign), "restore", str(out), "--create")
    assert kept.code == 1
    assert foreign.read_bytes() == b"not a database, but someone's file\n"
    elsewhere = run_cli("--db", "postgresql://localhost/x", "restore", str(out), "--create")
    assert elsewhere.code == 1
    assert "--create" in elsewhere.err
