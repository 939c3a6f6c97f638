"""[A1] One self-verifying file per ended session: archive it, verify it, restore it.

An archive is, in order::

    agentledger-archive 1\\n              magic and format version
    {manifest JSON}\\n                      counts, per-run digests, the session digest
    zlib(msgpack(session image))           every run, record, checkpoint and message
    sha256:<64 hex digits>\\n               over every byte before it

Format version 2 added the session's submitted messages: its manifest counts
them (``messages``, ``message_bytes``) and its body carries them. Archives of
version 1 (from before messages existed, holding none) are still read.
Format version 3 [G2] names in the manifest the records the archive holds (each
run's last record, ``run_through``) and where copied history came from
(``copied_from``: the other sessions' runs and records a fork copied); the body is
as in version 2, and archives of versions 1 and 2 are still read (those fields empty).

An archive of an encrypted store [A2] has its body sealed under the session's
data key (``manifest.sealed``): erasing the key makes the archive unreadable too.
The trailing checksum catches any damage or truncation; the manifest's
digests are recomputed from the decoded image, so a file whose checksum was
forged to fit still cannot restore anything but what its manifest claims.
The session digest is the one a :class:`PurgeReceipt` of the same session
carries. Files are written to a temporary name, fsynced, then linked to the
final name (which never exists half written) and are never overwritten.

Compression is the standard library's zlib: an archive is written once and
read rarely, the payloads are JSON that DEFLATE shrinks well, and the core
install stays without a compiled dependency.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from agentledger.errors import (
    ArchiveExistsError,
    CorruptArchiveError,
    CorruptRecordError,
    SessionActiveError,
    SessionHasActiveRunsError,
    ValidationError,
)
from agentledger.storage.archive_body import (
    CHECKPOINT_BOUND,
    MESSAGE_BOUND,
    RECORD_BOUND,
    RUN_BOUND,
    inflate_body,
)
from agentledger.storage.derivation import HISTORY_COPIED, CopiedFrom, derived_copy
from agentledger.storage.encryption.binding import SCHEME
from agentledger.storage.session_image import (
    SessionImage,
    SessionImageSource,
    image_byte_total,
    image_message_bytes,
    read_session_image,
    run_digest,
    session_digest,
)
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunMeta,
    RunStatus,
    Session,
    SessionMessage,
    SessionStatus,
)

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption
    from agentledger.storage.protocol import SessionAdmin

__all__ = [
    "ARCHIVE_SUFFIX",
    "FORMAT_VERSION",
    "ArchiveCarrier",
    "ArchiveManifest",
    "archive_bytes",
    "archive_session",
    "restore_archive",
    "restore_archive_bytes",
    "verify_archive",
]

FORMAT_VERSION = 3
"""The archive format this agentledger writes; it reads versions 1 and 2 too."""
_VERSIONS = (1, 2, 3)

ARCHIVE_SUFFIX = ".alarchive"
"""The file name ending the retention sweep gives archives."""

_MAGIC = b"agentledger-archive "
_TRAILER = len(b"sha256:") + 64 + 1
_COMPRESSION = "zlib"


class ArchiveManifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What an archive holds, readable without decompressing it [A1].

    ``session_digest`` equals the ``digest`` of the session's purge receipt;
    ``run_digests`` maps each run id to its digest; ``byte_total`` counts
    payload and checkpoint bytes as the receipt does; ``messages`` and
    ``message_bytes`` count the session's submitted messages and their JSON
    (format version 2; always 0 in version 1).

    [G2] From format version 3, ``run_through`` names each run's last record (the
    archive holds records 1 through it) and ``copied_from`` the sources of the
    history the session's runs copied from other sessions, in record order; both
    are empty in older archives.
    """

    format_version: int
    session_id: str
    labels: dict[str, str]
    session_created_at: datetime
    session_ended_at: datetime
    runs: int
    records: int
    checkpoints: int
    byte_total: int
    run_digests: dict[str, str]
    session_digest: str
    compression: str
    created_at: datetime
    messages: int = 0
    message_bytes: int = 0
    sealed: str = ""
    """[A2] ``""``: a plain body; else the scheme that sealed the body under the
    session's data key (an archive of an encrypted store): erasing the key makes
    the archive unreadable too."""
    run_through: dict[str, str] = msgspec.field(default_factory=dict)
    copied_from: list[CopiedFrom] = msgspec.field(default_factory=list)


class _Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The compressed part: the session image as stored, bytes for bytes."""

    session: Session
    runs: list[RunMeta]
    records: list[Record]
    checkpoints: dict[str, Checkpoint]
    messages: list[SessionMessage]


async def _store_image(store: SessionImageSource, session_id: str) -> SessionImage:
    """The ended session's image; refused while it is active or a run still runs."""
    image = await read_session_image(store, session_id)
    if image.session.status is not SessionStatus.ENDED:
        raise SessionActiveError(session_id=session_id)
    running = [r.run_id for r in image.runs if r.status is RunStatus.RUNNING]
    if running:
        raise SessionHasActiveRunsError(session_id=session_id, run_ids=running)
    return image


def _now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def manifest_of(
    image: SessionImage, created_at: datetime, sealed: str = "", version: int = FORMAT_VERSION
) -> ArchiveManifest:
    """The manifest describing ``image``, as an archive of format ``version`` written at
    ``created_at`` carries."""
    session = image.session
    assert session.ended_at is not None
    return ArchiveManifest(
        format_version=version,
        session_id=session.id,
        labels=dict(session.labels),
        session_created_at=session.created_at,
        session_ended_at=session.ended_at,
        runs=len(image.runs),
        records=len(image.records),
        checkpoints=len(image.checkpoints),
        byte_total=image_byte_total(image),
        run_digests={r.run_id: run_digest(image, r.run_id) for r in image.runs},
        session_digest=session_digest(image),
        compression=_COMPRESSION,
        created_at=created_at,
        messages=len(image.messages),
        message_bytes=image_message_bytes(image),
        sealed=sealed,
        run_through=_run_through(image) if version >= 3 else {},
        copied_from=_copied_from(image) if version >= 3 else [],
    )


def _run_through(image: SessionImage) -> dict[str, str]:
    """Each run's last record id ("0" for a run without records)."""
    through = {r.run_id: "0" for r in image.runs}
    for record in image.records:
        through[record.run_id] = record.id
    return through


def _copied_from(image: SessionImage) -> list[CopiedFrom]:
    """[G2] Where the session's copied history came from, in record order."""
    return [derived_copy(r).source for r in image.records if r.type == HISTORY_COPIED]


def encode_archive(
    image: SessionImage, created_at: datetime, encryption: Encryption | None = None
) -> tuple[bytes, ArchiveManifest]:
    """The whole archive file for ``image``, and its manifest; sealed with ``encryption``."""
    manifest = manifest_of(image, created_at, "" if encryption is None else SCHEME)
    body = _Body(
        session=image.session,
        runs=list(image.runs),
        records=list(image.records),
        checkpoints=dict(image.checkpoints),
        messages=list(image.messages),
    )
    content = b"".join(
        (
            _MAGIC + str(manifest.format_version).encode() + b"\n",
            msgspec.json.encode(manifest) + b"\n",
            _sealed(encryption, image.session.id, zlib.compress(msgspec.msgpack.encode(body), 6)),
        )
    )
    return content + b"sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n", manifest


def _sealed(encryption: Encryption | None, session_id: str, body: bytes) -> bytes:
    return body if encryption is None else encryption.seal_archive(session_id, body)


def _opened(encryption: Encryption | None, manifest: ArchiveManifest, body: bytes) -> bytes:
    """The plain body of a sealed archive [A2]; a plain archive's body unchanged."""
    if not manifest.sealed:
        return body
    if encryption is None:
        raise ValidationError(
            field="encryption",
            expected="the keyring and vault that sealed this archive (an encrypted store)",
            got=None,
        )
    if manifest.sealed != SCHEME:
        raise ValidationError(field="encryption", expected=f"scheme {SCHEME}", got=manifest.sealed)
    return encryption.open_archive(manifest.session_id, body)


def inflated_bound(manifest: ArchiveManifest) -> int:
    """The most bytes the body of an archive with this manifest can inflate to.

    Payload and checkpoint bytes as counted, plus each run, record and
    checkpoint at its largest without them: every id at :data:`MAX_ID_LENGTH`
    characters of 4 UTF-8 bytes, every label set at its limits. A body that
    inflates past it does not hold what its manifest says.
    """
    entries = manifest.records * RECORD_BOUND + manifest.checkpoints * CHECKPOINT_BOUND
    messages = manifest.message_bytes + manifest.messages * MESSAGE_BOUND
    return manifest.byte_total + entries + messages + (manifest.runs + 1) * RUN_BOUND


def _parse(data: bytes, path: str) -> tuple[ArchiveManifest, bytes]:
    """The manifest and the (compressed, maybe sealed) body of an archive whose checksum holds."""

    def corrupt(reason: str) -> CorruptArchiveError:
        return CorruptArchiveError(path=path, reason=reason)

    first, newline, rest = data.partition(b"\n")
    if not newline or not first.startswith(_MAGIC):
        raise corrupt("not an agentledger archive")
    version = first[len(_MAGIC) :]
    if version not in {str(v).encode() for v in _VERSIONS}:
        raise corrupt(
            f"format version {version.decode(errors='replace')!r} is not supported "
            f"(this agentledger reads versions {', '.join(map(str, _VERSIONS))})"
        )
    if len(data) < len(first) + 1 + _TRAILER:
        raise corrupt("truncated")
    content, trailer = data[:-_TRAILER], data[-_TRAILER:]
    expected = b"sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n"
    if trailer != expected:
        raise corrupt("checksum mismatch: the file is damaged or truncated")
    manifest_line, newline, body = rest[: len(rest) - _TRAILER].partition(b"\n")
    try:
        manifest = msgspec.json.decode(manifest_line, type=ArchiveManifest)
    except msgspec.DecodeError as e:
        raise corrupt(f"unreadable manifest: {e}") from e
    if str(manifest.format_version).encode() != version:
        raise corrupt(
            f"the manifest says format version {manifest.format_version}, "
            f"the file's first line {version.decode()}"
        )
    return manifest, body


def read_manifest(data: bytes, path: str) -> ArchiveManifest:
    """The manifest of an archive's bytes, its checksum checked, its body left unopened.

    What a caller without the data key (a ``StoreClient``) can check of a sealed archive.
    """
    return _parse(data, path)[0]


def decode_archive(
    data: bytes,
    path: str,
    encryption: Encryption | None = None,
    *,
    max_inflated_bytes: int | None = None,
) -> tuple[ArchiveManifest, SessionImage]:
    """The manifest and image of an archive's bytes, every check passed.

    Raises:
        CorruptArchiveError: not an archive, an unknown format version, a
            checksum mismatch (damage, truncation), contents that do not
            match their manifest, or a body that inflates past its manifest's size.
    """

    def corrupt(reason: str) -> CorruptArchiveError:
        return CorruptArchiveError(path=path, reason=reason)

    manifest, compressed = _parse(data, path)
    bound = inflated_bound(manifest)
    if max_inflated_bytes is not None:
        bound = min(bound, max_inflated_bytes)

    def past(bound: int) -> CorruptArchiveError:
        limited = max_inflated_bytes is not None and bound >= max_inflated_bytes
        why = "the limit is" if limited else "the manifest's counts allow"
        return corrupt(f"the body inflates past {bound} bytes, which {why} (refused)")

    try:
        compressed = _opened(encryption, manifest, compressed)
        body = inflate_body(compressed, manifest, bound, corrupt, past)
    except CorruptRecordError as e:
        if isinstance(e, CorruptArchiveError):
            raise
        raise corrupt(f"sealed body: {e.reason}") from e
    except (msgspec.DecodeError, zlib.error) as e:
        raise corrupt(f"unreadable contents: {e}") from e
    image = SessionImage(
        session=body.session,
        runs=body.runs,
        records=body.records,
        checkpoints=body.checkpoints,
        messages=body.messages,
    )
    try:
        again = manifest_of(image, manifest.created_at, manifest.sealed, manifest.format_version)
    except Exception as e:  # a digest cannot be computed over a malformed image
        raise corrupt(f"malformed session image: {e}") from e
    if again != manifest:
        wrong = [f for f in manifest.__struct_fields__ if getattr(again, f) != getattr(manifest, f)]
        raise corrupt(f"contents do not match the manifest ({', '.join(wrong)})")
    return manifest, image


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise CorruptArchiveError(path=str(path), reason="no such file") from e
    except IsADirectoryError as e:
        raise CorruptArchiveError(path=str(path), reason="a directory, not a file") from e


async def verify_archive(
    path: str | os.PathLike[str],
    encryption: Encryption | None = None,
    *,
    max_inflated_bytes: int | None = None,
) -> ArchiveManifest:
    """[A1] Read and check a whole archive; its manifest if every check passes.

    A sealed archive [A2] needs the ``encryption`` of the store it came from.
    ``max_inflated_bytes`` caps the decompressed body below what the manifest allows.

    Raises:
        CorruptArchiveError: missing, damaged, truncated, tampered with, of an
            unknown format version, or inflating past its bound.
    """
    where = Path(path)

    def check() -> ArchiveManifest:
        data = _read(where)
        return decode_archive(data, str(where), encryption, max_inflated_bytes=max_inflated_bytes)[
            0
        ]

    return await asyncio.to_thread(check)


def _write_new(path: Path, data: bytes) -> bool:
    """Write ``data`` as a new file at ``path``: True, or False if a file is there already.

    The bytes go to a temporary file in the same directory and are fsynced
    before a hard link gives them the final name (``link`` never replaces, unlike
    ``rename``), so the final name only ever holds a whole file.
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return True
    finally:
        os.unlink(temporary)


def _existing(
    path: Path, session_id: str, digest: str, encryption: Encryption | None
) -> ArchiveManifest:
    """The manifest of the archive at ``path`` if it is this session's same archive.

    Without ``encryption``, a sealed archive is checked as far as it can be
    (checksum and manifest): the caller has no key to open its body.
    """
    try:
        data = _read(path)
        manifest = read_manifest(data, str(path))
        if encryption is not None or not manifest.sealed:
            manifest = decode_archive(data, str(path), encryption)[0]
    except CorruptArchiveError as e:
        raise ArchiveExistsError(path=str(path), session_id=session_id, reason=e.reason) from e
    if manifest.session_id != session_id:
        raise ArchiveExistsError(
            path=str(path),
            session_id=session_id,
            reason=f"it archives session {manifest.session_id!r}",
        )
    if manifest.session_digest != digest:
        raise ArchiveExistsError(
            path=str(path),
            session_id=session_id,
            reason=f"its digest is {manifest.session_digest}, the session's is {digest}",
        )
    return manifest


@runtime_checkable
class ArchiveCarrier(Protocol):
    """A store that makes and restores archive files where the data keys are [A2].

    ``StoreClient`` is one: the service behind it seals an encrypted session's
    archive under the session's data key, which never leaves the service, so
    an archive made through a client is the same sealed file as one made beside
    the store.
    """

    async def export_archive(self, session_id: str, /) -> bytes:
        """The archive file's bytes for the ended session (see :func:`archive_bytes`)."""
        ...

    async def import_archive(self, data: bytes, /) -> ArchiveManifest:
        """Restore an archive file's bytes (see :func:`restore_archive_bytes`)."""
        ...


async def archive_bytes(store: SessionImageSource, session_id: str) -> bytes:
    """The archive file of the ended session, built beside the store (sealed if it is encrypted).

    What the store service answers ``export_archive`` with.

    Raises:
        SessionNotFoundError, SessionPurgedError: nothing to archive.
        SessionActiveError, SessionHasActiveRunsError: not ended yet.
    """
    image = await _store_image(store, session_id)
    data, _ = await asyncio.to_thread(encode_archive, image, _now(), _encryption_of(store))
    return data


async def restore_archive_bytes(
    store: SessionAdmin,
    data: bytes,
    where: str = "<archive bytes>",
    *,
    max_inflated_bytes: int | None = None,
) -> ArchiveManifest:
    """Restore an archive file's bytes into ``store`` (see :func:`restore_archive`).

    What the store service does with ``import_archive``: it opens a sealed body
    with its own keys.
    """
    encryption = _encryption_of(store)
    manifest, image = await asyncio.to_thread(
        lambda: decode_archive(data, where, encryption, max_inflated_bytes=max_inflated_bytes)
    )
    await store.import_session(image)
    return manifest


async def archive_session(
    store: SessionImageSource, session_id: str, path: str | os.PathLike[str]
) -> ArchiveManifest:
    """[A1] Write the ended session to one self-verifying archive file at ``path``.

    If ``path`` already holds a valid archive of this session with the same
    digest, it is kept and its manifest returned (archiving is idempotent);
    any other file there is refused and left alone. Through an
    :class:`ArchiveCarrier` (a ``StoreClient``) the file is built by the
    service, sealed there if its store is encrypted [A2].

    Raises:
        SessionNotFoundError, SessionPurgedError: nothing to archive.
        SessionActiveError: the session has not ended.
        SessionHasActiveRunsError: a run of the session is still running.
        ArchiveExistsError: ``path`` holds something else.
    """
    where = Path(path)
    encryption = _encryption_of(store)
    if isinstance(store, ArchiveCarrier):
        data = await store.export_archive(session_id)
        manifest = await asyncio.to_thread(read_manifest, data, f"the archive of {session_id!r}")
    else:
        image = await _store_image(store, session_id)
        data, manifest = await asyncio.to_thread(encode_archive, image, _now(), encryption)

    def write() -> ArchiveManifest:
        if where.exists() or not _write_new(where, data):
            return _existing(where, session_id, manifest.session_digest, encryption)
        return manifest

    return await asyncio.to_thread(write)


async def restore_archive(
    store: SessionAdmin,
    path: str | os.PathLike[str],
    *,
    max_inflated_bytes: int | None = None,
) -> ArchiveManifest:
    """[A1] Recreate the archived session in a store that never saw it, byte for byte.

    The whole file is verified before anything is written, and the session is
    imported in one transaction: a refusal changes nothing. Through an
    :class:`ArchiveCarrier` (a ``StoreClient``) the file is sent whole to the
    service, which verifies and opens it with its own keys [A2].

    Raises:
        CorruptArchiveError: the file is damaged, truncated, of an unknown
            format, or inflates past its manifest's bound or ``max_inflated_bytes``.
        SessionKeyErasedError: a sealed archive [A2] whose session key was erased.
        ValidationError: a sealed archive and a store without its keyring and vault.
        SessionPurgedError: the store purged this session id.
        SessionConflictError: the store has a session with this id.
        RunConflictError: the store has a run with one of the archive's run ids.
    """
    where = Path(path)
    data = await asyncio.to_thread(_read, where)
    if isinstance(store, ArchiveCarrier):
        await asyncio.to_thread(read_manifest, data, str(where))  # a damaged file is not sent
        return await store.import_archive(data)
    return await restore_archive_bytes(
        store, data, str(where), max_inflated_bytes=max_inflated_bytes
    )


def _encryption_of(store: Any) -> Encryption | None:
    """[A2] the store's encryption at rest: an encrypted store's archives are sealed too."""
    encryption: Encryption | None = getattr(store, "encryption", None)
    return encryption
