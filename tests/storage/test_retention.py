"""[A1] The retention sweep: archive then purge, idempotent, resumable after SIGKILL anywhere."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from agentledger.errors import ArchiveExistsError, SessionConflictError, SessionPurgedError
from agentledger.storage import PurgeReceipt, RecordBuilder, RunStart, RunStatus
from agentledger.storage.archive import verify_archive
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import EPOCH
from agentledger.storage.retention import SweepOutcome, archive_path, sweep
from agentledger.storage.session_image import read_session_image, session_digest
from agentledger.storage.sqlite import SQLiteStore
from tests.storage.archived import ended_session

CUTOFF = EPOCH + timedelta(days=1)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with await SQLiteStore.open(tmp_path / "ledger.db") as opened:
        yield opened


async def _populate(world: World, old: int) -> tuple[list[str], dict[str, str]]:
    """``old`` sessions ended before CUTOFF, and three that are not to be purged.

    Returns the old sessions' ids and their digests before any sweep.
    """
    sids = [await ended_session(world, f"old{i}") for i in range(old)]
    await ended_session(world, "recent", ended_at=CUTOFF + timedelta(hours=1))
    await world.session("active")
    busy = await world.session("busy")
    await world.root("busy-run", session=busy)
    await world.store.end_session(busy, ended_at=world.now())
    digests = {sid: session_digest(await read_session_image(world.store, sid)) for sid in sids}
    return sids, digests


async def test_a_dry_run_changes_nothing(store: SQLiteStore, tmp_path: Path) -> None:
    world = World(store)
    sids, _ = await _populate(world, 2)
    async with world.unchanged():
        results = await sweep(store, CUTOFF, archive_to=tmp_path / "dir", dry_run=True)
    assert [(r.session_id, r.outcome) for r in results] == [
        *((sid, SweepOutcome.WOULD_PURGE) for sid in sids),
        (world.id("busy"), SweepOutcome.SKIPPED),
    ]
    assert results[0].archive == str(archive_path(tmp_path / "dir", sids[0]))
    assert results[0].receipt is None
    assert "busy-run" in results[-1].reason
    assert not (tmp_path / "dir").exists()


async def test_a_sweep_archives_then_purges_and_a_second_does_nothing_new(
    store: SQLiteStore, tmp_path: Path
) -> None:
    world = World(store)
    sids, digests = await _populate(world, 2)
    results = await sweep(store, CUTOFF, archive_to=tmp_path / "dir")
    purged = [r for r in results if r.outcome is SweepOutcome.PURGED]
    assert [r.session_id for r in purged] == sids
    for result in purged:
        assert result.receipt is not None
        assert result.receipt.digest == digests[result.session_id]
        manifest = await verify_archive(result.archive)
        assert (manifest.session_id, manifest.session_digest) == (
            result.session_id,
            digests[result.session_id],
        )
        with pytest.raises(SessionPurgedError):
            await store.load_session(result.session_id)
    assert (await store.load_session(world.id("recent"))).id == world.id("recent")
    async with world.unchanged():
        again = await sweep(store, CUTOFF, archive_to=tmp_path / "dir")
    assert [r.outcome for r in again] == [SweepOutcome.SKIPPED]


async def test_a_sweep_without_archives_purges(store: SQLiteStore) -> None:
    world = World(store)
    sids, digests = await _populate(world, 1)
    results = await sweep(store, CUTOFF)
    assert results[0].archive == ""
    assert results[0].receipt is not None
    assert results[0].receipt.digest == digests[sids[0]]


class LateStarts(SQLiteStore):
    """A real SQLite store where a worker starts runs in an ended session ([C2]: each is
    recorded canceled) just before the first ``late`` purges: the race between the
    sweep's archive and its purge, made to happen every time."""

    late = 0

    async def purge_session(self, session_id: str, /, expected_digest: str = "") -> PurgeReceipt:
        if self.late > 0:
            self.late -= 1
            run = RecordBuilder(
                RunStart(
                    run_id=f"late-{self.late}-{session_id}",
                    agent_id="late",
                    session_id=session_id,
                    started_at=EPOCH + timedelta(days=2),
                )
            )
            started = await self.start_root_run(run.root_start())
            assert started.run_status is RunStatus.CANCELED
        return await super().purge_session(session_id, expected_digest)


@pytest.mark.parametrize("late", [1, 3])
async def test_a_run_started_after_the_end_between_archive_and_purge_is_not_lost(
    tmp_path: Path, late: int
) -> None:
    """The purge is conditional on the archived digest: a session that gained a canceled run
    since its archive is not purged from under it; it is archived again (or left for later)."""
    store = await LateStarts.open(tmp_path / "ledger.db")
    try:
        world = World(store)
        sid = await ended_session(world, "raced")
        store.late = late
        (result,) = await sweep(store, CUTOFF, archive_to=tmp_path / "dir")
        if late < 3:
            assert result.outcome is SweepOutcome.PURGED
            manifest = await verify_archive(result.archive)
            assert result.receipt is not None
            assert manifest.session_digest == result.receipt.digest
            assert f"late-0-{sid}" in manifest.run_digests  # the late run is in the archive
        else:  # it kept changing: nothing purged, no archive of an older state left behind
            assert result.outcome is SweepOutcome.SKIPPED
            assert "kept changing" in result.reason
            assert not await asyncio.to_thread(os.path.exists, result.archive)
            runs = await store.list_runs_by_session(sid)
            assert {f"late-{i}-{sid}" for i in range(3)} <= {r.run_id for r in runs}
            again = await sweep(store, CUTOFF, archive_to=tmp_path / "dir")
            assert [r.outcome for r in again] == [SweepOutcome.PURGED]
    finally:
        await store.close()


async def test_a_purge_refuses_another_digest_and_changes_nothing(store: SQLiteStore) -> None:
    world = World(store)
    sid = await ended_session(world, "kept")
    digest = session_digest(await read_session_image(store, sid))
    async with world.unchanged():
        with pytest.raises(SessionConflictError) as refused:
            await store.purge_session(sid, "sha256:" + "0" * 64)
    assert (refused.value.session_id, refused.value.field) == (sid, "digest")
    assert refused.value.expected == digest
    assert (await store.purge_session(sid, digest)).digest == digest


async def test_a_different_file_under_an_archives_name_stops_the_sweep(
    store: SQLiteStore, tmp_path: Path
) -> None:
    world = World(store)
    sids, _ = await _populate(world, 2)
    directory = tmp_path / "dir"
    directory.mkdir()
    squatter = archive_path(directory, sids[1])
    squatter.write_bytes(b"someone else's file")
    with pytest.raises(ArchiveExistsError) as e:
        await sweep(store, CUTOFF, archive_to=directory)
    assert e.value.session_id == sids[1]
    assert squatter.read_bytes() == b"someone else's file"
    with pytest.raises(SessionPurgedError):
        await store.load_session(sids[0])  # the one before it is done
    assert (await store.load_session(sids[1])).id == sids[1]


def _sweeper(db: Path, directory: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentledger", "--db", str(db), "retention",
         "--ended-before", CUTOFF.isoformat(), "--archive-to", str(directory), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory)) if directory.exists() else []


def _kill_somewhere(process: subprocess.Popen[str], directory: Path, rng: random.Random) -> bool:
    """SIGKILL the sweep once it wrote 0-3 more files, a few random ms later; if still alive."""
    goal = len(_files(directory)) + rng.randint(0, 3)
    deadline = time.monotonic() + 30
    while process.poll() is None and len(_files(directory)) < goal:
        if time.monotonic() > deadline:
            break
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.05))
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    return True


async def test_a_sweep_killed_anywhere_resumes_to_each_archive_exactly_once(
    tmp_path: Path,
) -> None:
    """SIGKILL a real sweep process at random points; every final-named file always verifies."""
    db, directory = tmp_path / "ledger.db", tmp_path / "dir"
    async with await SQLiteStore.open(db) as store:
        sids, digests = await _populate(World(store), 10)
    rng = random.Random(1616)
    kills = 0
    for _ in range(3):
        process = _sweeper(db, directory)
        kills += _kill_somewhere(process, directory, rng)
        process.communicate(timeout=30)
        for name in _files(directory):
            if not name.startswith("."):
                await verify_archive(directory / name)  # never a half file under its name
    assert kills >= 1
    final = _sweeper(db, directory)
    out, err = final.communicate(timeout=120)
    assert final.returncode == 0, err
    async with await SQLiteStore.open(db) as store:
        for sid in sids:
            with pytest.raises(SessionPurgedError):
                await store.load_session(sid)
        again = await sweep(store, CUTOFF, archive_to=directory)
        assert [r.outcome for r in again] == [SweepOutcome.SKIPPED]
    archives = [name for name in _files(directory) if not name.startswith(".")]
    assert archives == sorted(archive_path(directory, sid).name for sid in sids)
    for sid in sids:
        manifest = await verify_archive(archive_path(directory, sid))
        assert (manifest.session_id, manifest.session_digest) == (sid, digests[sid])
    assert _files(directory) == archives  # no temporary file is left behind
    printed = json.loads(out)["sessions"]
    assert {r["outcome"] for r in printed} <= {"purged", "skipped"}
    assert all(r["receipt"]["digest"] == digests[r["session_id"]] for r in printed[:-1])
