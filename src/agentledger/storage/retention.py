"""[A1] The retention sweep: archive (optionally) then purge every session ended before a cut-off.

The sweep keeps no state of its own: what is left to do is read from the
store (which sessions are still ended, not purged) and the archive directory
(which archives exist), so a sweep killed at any point is resumed by running
it again, and a sweep with nothing left to do changes nothing.

Per session, in order: its archive ``DIR/<quoted id>.alarchive`` is written
(or, if one is already there, verified and reused when it holds this
session's same digest; anything else there is refused with
:class:`~agentledger.errors.ArchiveExistsError` and the sweep stops), then the
session is purged only if its digest is still the archive's, which the purge's
own transaction decides (``purge_session(id, expected_digest)``). An ended
session can still gain a canceled run (a start after the end, [C2]); if one
lands between archive and purge, the purge refuses, that archive is removed,
and the session is archived and purged again (up to three times, then skipped).
Sessions that still have a running run are skipped and reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import hashlib
import os
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

import msgspec

from agentledger.errors import (
    CorruptArchiveError,
    SessionConflictError,
    SessionHasActiveRunsError,
)
from agentledger.storage.archive import ARCHIVE_SUFFIX, archive_session, read_manifest
from agentledger.storage.file_mode import make_directories
from agentledger.storage.protocol import SessionAdmin, Store
from agentledger.storage.types import PurgeReceipt, RunStatus, Session, SessionStatus

if TYPE_CHECKING:
    from agentledger.storage.archive import ArchiveManifest

__all__ = ["SweepOutcome", "SweepResult", "archive_path", "sweep"]

_PAGE = 500
_ATTEMPTS = 3
"""Archive-and-purge rounds per session before a session that keeps changing is skipped."""


class _SweepStore(Store, SessionAdmin, Protocol):
    """What a sweep reads and purges through: a store with session administration."""


class SweepOutcome(StrEnum):
    """What the sweep did with one session."""

    PURGED = "purged"
    WOULD_PURGE = "would_purge"  # a dry run
    SKIPPED = "skipped"  # a run still runs; purge would refuse


class SweepResult(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One session the sweep found ended before the cut-off, and what became of it.

    ``archive`` is the archive's path (``""`` without ``archive_to``);
    ``archive_reused`` says it was already there, verified and kept;
    ``receipt`` is the purge receipt (``None`` for a dry run or a skip);
    ``reason`` says why a session was skipped.
    """

    session_id: str
    ended_at: datetime
    outcome: SweepOutcome
    archive: str = ""
    archive_reused: bool = False
    receipt: PurgeReceipt | None = None
    reason: str = ""


def archive_path(directory: str | os.PathLike[str], session_id: str) -> Path:
    """Where the sweep keeps a session's archive in ``directory``.

    The id is percent-quoted into one file name; one too long for a file name
    is replaced by its SHA-256 (the manifest names the session either way).
    """
    name = quote(session_id, safe="")
    if len(name) > 200:
        name = "sha256-" + hashlib.sha256(session_id.encode()).hexdigest()
    return Path(directory) / (name + ARCHIVE_SUFFIX)


async def _eligible(store: SessionAdmin, ended_before: datetime) -> list[Session]:
    """Every ended session whose ``ended_at`` is before ``ended_before``, oldest created first."""
    found: list[Session] = []
    cursor = ""
    while True:
        page = await store.list_sessions((SessionStatus.ENDED,), cursor=cursor, limit=_PAGE)
        found.extend(
            s for s in page.sessions if s.ended_at is not None and s.ended_at < ended_before
        )
        cursor = page.next_cursor
        if not cursor:
            return found[::-1]


def _remove_partials(path: Path) -> None:
    """Delete temporary files a killed archive writer left for ``path``'s name."""
    for leftover in glob.glob(glob.escape(str(path.parent / f".{path.name}.")) + "*.partial"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


async def _sweep_one(
    store: _SweepStore,
    session: Session,
    archive_to: Path | None,
    dry_run: bool,
) -> SweepResult:
    assert session.ended_at is not None
    result = SweepResult(
        session_id=session.id, ended_at=session.ended_at, outcome=SweepOutcome.WOULD_PURGE
    )
    running = await store.list_runs_by_session(session.id, statuses=(RunStatus.RUNNING,))
    if running:
        reason = str(
            SessionHasActiveRunsError(session_id=session.id, run_ids=[r.run_id for r in running])
        )
        return msgspec.structs.replace(result, outcome=SweepOutcome.SKIPPED, reason=reason)
    if archive_to is None:
        if dry_run:
            return result
        receipt = await store.purge_session(session.id)
        return msgspec.structs.replace(result, outcome=SweepOutcome.PURGED, receipt=receipt)
    path = archive_path(archive_to, session.id)
    exists = await asyncio.to_thread(path.exists)
    result = msgspec.structs.replace(result, archive=str(path), archive_reused=exists)
    if dry_run:
        return result
    for _ in range(_ATTEMPTS):
        manifest = await archive_session(store, session.id, path)
        await asyncio.to_thread(_remove_partials, path)
        try:  # purged only if still what the archive holds: one transaction decides
            receipt = await store.purge_session(session.id, manifest.session_digest)
        except SessionConflictError:  # a run started after the end [C2] since the archive
            await asyncio.to_thread(_discard, path, manifest)
            continue
        if receipt.digest != manifest.session_digest:
            raise CorruptArchiveError(  # only a purge made before, by someone else, gets here
                path=str(path),
                reason=f"the session was purged with digest {receipt.digest}, "
                f"not the archived {manifest.session_digest}",
            )
        return msgspec.structs.replace(result, outcome=SweepOutcome.PURGED, receipt=receipt)
    reason = f"it kept changing between archive and purge ({_ATTEMPTS} tries); left for later"
    return msgspec.structs.replace(result, outcome=SweepOutcome.SKIPPED, reason=reason)


def _discard(path: Path, manifest: ArchiveManifest) -> None:
    """Remove the archive the sweep wrote (or reused) for a session that changed since.

    Only that very archive (same session, same digest) is removed; the session
    still holds all it held, and more. Anything else there is left alone.
    """
    try:
        found = read_manifest(path.read_bytes(), str(path))
    except (OSError, CorruptArchiveError):
        return
    if (found.session_id, found.session_digest) != (manifest.session_id, manifest.session_digest):
        return
    os.unlink(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


async def sweep(
    store: _SweepStore,
    ended_before: datetime,
    archive_to: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
) -> list[SweepResult]:
    """[A1] Archive (to ``archive_to``, optionally) then purge each session ended before a cut-off.

    Idempotent and resumable: run again after any interruption, it finishes
    what is left and finds nothing to do once done. ``dry_run`` reports what
    would happen and writes nothing.

    Raises:
        ArchiveExistsError: the archive's file name holds something else
            (sessions before it are done; the sweep stops there).
    """
    directory = Path(archive_to) if archive_to is not None else None
    if directory is not None and not dry_run:
        await asyncio.to_thread(make_directories, directory)  # durable before any purge
    return [
        await _sweep_one(store, session, directory, dry_run)
        for session in await _eligible(store, ended_before)
    ]
