"""[A1] Archive files: byte-for-byte restore, self-verification, refusals that change nothing."""

from __future__ import annotations

import hashlib
import os
import random
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import (
    ArchiveExistsError,
    CorruptArchiveError,
    SessionActiveError,
    SessionConflictError,
    SessionHasActiveRunsError,
    SessionPurgedError,
)
from agentledger.storage.archive import (
    FORMAT_VERSION,
    archive_session,
    inflated_bound,
    read_manifest,
    restore_archive,
    verify_archive,
)
from agentledger.storage.archive_body import PAGE
from agentledger.storage.conformance import World
from agentledger.storage.conformance._import import messaged_session
from agentledger.storage.derivation import HISTORY_COPIED, CopiedFrom
from agentledger.storage.session_image import SessionImage, read_session_image, session_digest
from agentledger.storage.sqlite import SQLiteStore
from tests.storage.archived import ended_session


@pytest.fixture
async def source(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with await SQLiteStore.open(tmp_path / "source.db") as store:
        yield store


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with await SQLiteStore.open(tmp_path / "target.db") as store:
        yield store


@pytest.fixture
async def archived(source: SQLiteStore, tmp_path: Path) -> tuple[World, Path, bytes]:
    """A rich ended session in ``source``, archived: its world, the file and its bytes."""
    world = World(source)
    await ended_session(world, "s")
    path = tmp_path / "s.alarchive"
    await archive_session(source, world.id("s"), path)
    return world, path, path.read_bytes()


def _rechecksummed(content: bytes) -> bytes:
    """``content`` (everything but a trailer) with a valid trailing checksum."""
    return content + b"sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n"


async def test_restore_recreates_the_session_byte_for_byte(
    archived: tuple[World, Path, bytes], target: SQLiteStore
) -> None:
    world, path, _ = archived
    before = await world.dump()
    manifest = await verify_archive(path)
    assert manifest.format_version == FORMAT_VERSION
    assert manifest.session_id == world.id("s")
    assert manifest.labels == {"tenant": "acme", "tier": "gold"}
    assert (manifest.runs, manifest.checkpoints) == (4, 1)
    assert set(manifest.run_digests) == set(world.run_ids)
    assert manifest.session_digest.startswith("sha256:")

    restored = await restore_archive(target, path)
    assert restored == manifest
    assert await dump_of(target, world) == before


async def dump_of(store: SQLiteStore, world: World) -> dict[str, object]:
    from agentledger.storage.conformance import dump_store

    return await dump_store(store, world.session_ids, world.run_ids)


async def test_the_session_digest_is_the_purge_receipts(
    archived: tuple[World, Path, bytes],
) -> None:
    world, path, _ = archived
    receipt = await world.store.purge_session(world.id("s"))
    assert receipt.digest == (await verify_archive(path)).session_digest


async def test_a_purged_session_is_not_restored(archived: tuple[World, Path, bytes]) -> None:
    world, path, _ = archived
    await world.store.purge_session(world.id("s"))
    async with world.unchanged():
        with pytest.raises(SessionPurgedError):
            await restore_archive(world.store, path)


async def test_an_existing_session_is_not_overwritten(
    archived: tuple[World, Path, bytes],
) -> None:
    world, path, _ = archived
    async with world.unchanged():
        with pytest.raises(SessionConflictError):
            await restore_archive(world.store, path)


async def test_only_finished_sessions_are_archived(source: SQLiteStore, tmp_path: Path) -> None:
    world = World(source)
    active = await world.session("active")
    with pytest.raises(SessionActiveError) as e:
        await archive_session(source, active, tmp_path / "a.alarchive")
    assert e.value.session_id == active
    busy = await world.session("busy")
    run = await world.root("busy-run", session=busy)
    await source.end_session(busy, ended_at=world.now())
    with pytest.raises(SessionHasActiveRunsError) as running:
        await archive_session(source, busy, tmp_path / "b.alarchive")
    assert running.value.run_ids == (run.run.run_id,)
    assert sorted(os.listdir(tmp_path)) == ["source.db", "source.db-shm", "source.db-wal"]


async def test_an_archive_is_reused_when_the_same_and_refused_when_not(
    archived: tuple[World, Path, bytes], tmp_path: Path
) -> None:
    world, path, data = archived
    again = await archive_session(world.store, world.id("s"), path)
    assert again == await verify_archive(path)  # the first file, kept
    assert path.read_bytes() == data
    other = await ended_session(world, "other")
    with pytest.raises(ArchiveExistsError) as e:
        await archive_session(world.store, other, path)
    assert (e.value.path, e.value.session_id) == (str(path), other)
    assert path.read_bytes() == data
    junk = tmp_path / "junk.alarchive"
    junk.write_bytes(b"not an archive")
    with pytest.raises(ArchiveExistsError):
        await archive_session(world.store, other, junk)
    assert junk.read_bytes() == b"not an archive"
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []


async def _refused(path: Path, store: SQLiteStore, world: World) -> CorruptArchiveError:
    """Both verify and restore refuse ``path`` with a CorruptArchiveError; nothing lands."""
    with pytest.raises(CorruptArchiveError) as verified:
        await verify_archive(path)
    before = await dump_of(store, world)
    with pytest.raises(CorruptArchiveError) as restored:
        await restore_archive(store, path)
    assert await dump_of(store, world) == before
    assert verified.value.path == str(path)
    assert restored.value.reason == verified.value.reason
    return verified.value


async def test_any_flipped_byte_is_refused(
    archived: tuple[World, Path, bytes], target: SQLiteStore, tmp_path: Path
) -> None:
    world, _, data = archived
    rng = random.Random(16)
    damaged = tmp_path / "damaged.alarchive"
    # Every region: the magic line, the manifest, the compressed body, the checksum.
    offsets = {0, 21, len(data) // 3, len(data) - 72, len(data) - 1}
    offsets |= {rng.randrange(len(data)) for _ in range(150)}
    for offset in sorted(offsets):
        flipped = bytearray(data)
        flipped[offset] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(flipped))
        await _refused(damaged, target, world)


async def test_a_truncated_archive_is_refused(
    archived: tuple[World, Path, bytes], target: SQLiteStore, tmp_path: Path
) -> None:
    world, _, data = archived
    cut = tmp_path / "cut.alarchive"
    for size in (0, 10, 22, len(data) // 2, len(data) - 72, len(data) - 1):
        cut.write_bytes(data[:size])
        await _refused(cut, target, world)
    assert "no such file" in (await _refused(tmp_path / "absent", target, world)).reason


async def test_another_format_version_is_refused(
    archived: tuple[World, Path, bytes], target: SQLiteStore, tmp_path: Path
) -> None:
    world, _, data = archived
    newer = tmp_path / "v4.alarchive"
    newer.write_bytes(_rechecksummed(data[:-72].replace(b"archive 3\n", b"archive 4\n", 1)))
    error = await _refused(newer, target, world)
    assert "format version '4' is not supported" in error.reason
    older = tmp_path / "v1.alarchive"  # a version 1 first line over a version 3 manifest
    older.write_bytes(_rechecksummed(data[:-72].replace(b"archive 3\n", b"archive 1\n", 1)))
    error = await _refused(older, target, world)
    assert "the manifest says format version 3" in error.reason


async def test_a_checksum_forged_over_changed_contents_is_refused(
    archived: tuple[World, Path, bytes], target: SQLiteStore, tmp_path: Path
) -> None:
    world, _, data = archived
    forged = tmp_path / "forged.alarchive"
    content = data[:-72]
    forged.write_bytes(_rechecksummed(content.replace(b'"runs":4', b'"runs":3', 1)))
    assert "do not match the manifest (runs)" in (await _refused(forged, target, world)).reason
    tier = content.replace(b'"tier":"gold"', b'"tier":"gilt"', 1)
    forged.write_bytes(_rechecksummed(tier))
    assert "labels" in (await _refused(forged, target, world)).reason


def _with_body(data: bytes, body: bytes) -> bytes:
    """``data``'s magic line and manifest with another compressed body, checksummed anew."""
    magic, manifest, _ = data.split(b"\n", 2)
    return _rechecksummed(magic + b"\n" + manifest + b"\n" + body)


async def test_a_body_inflating_past_its_manifest_is_refused_unread(
    archived: tuple[World, Path, bytes], target: SQLiteStore, tmp_path: Path
) -> None:
    """A decompression bomb with a fitting checksum is refused a page in, in memory too:
    zeros are no session image, and an image whose first value claims 64 MiB passes the
    manifest's bound before a byte of it is inflated."""
    world, path, data = archived
    bound = inflated_bound(read_manifest(data, str(path)))
    bomb_size = 64 * 1024 * 1024
    assert bound < bomb_size // 8
    claim = b"\x84\xa7session\xc6" + bomb_size.to_bytes(4, "big")  # {"session": 64 MiB...
    for prefix, reason in ((b"", "unreadable contents"), (claim, f"inflates past {bound} bytes")):
        squeeze = zlib.compressobj(9)
        chunk = bytes(1024 * 1024)
        bomb = squeeze.compress(prefix)
        bomb += b"".join(squeeze.compress(chunk) for _ in range(bomb_size // len(chunk)))
        bomb_file = tmp_path / "bomb.alarchive"
        bomb_file.write_bytes(_with_body(data, bomb + squeeze.flush()))
        tracemalloc.start()
        try:
            error = await _refused(bomb_file, target, world)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert reason in error.reason
        assert peak < 32 * PAGE, peak  # 2 MiB, for a 64 MiB bomb: the file, a page, the checks

    for claim in (b'"records":-99999999', b'"records":4611686018427387904'):  # counts are claims
        forged = tmp_path / "claims.alarchive"
        manifest = data.split(b"\n", 2)[1]
        records = manifest[manifest.index(b'"records":') :].split(b",", 1)[0]
        forged.write_bytes(_rechecksummed(data[:-72].replace(records, claim, 1)))
        assert (await _refused(forged, target, world)).reason

    padded = tmp_path / "padded.alarchive"
    padded.write_bytes(_with_body(data, data.split(b"\n", 2)[2][:-72] + b"junk"))
    assert "padded" in (await _refused(padded, target, world)).reason


async def test_a_lower_inflation_limit_can_be_set(
    archived: tuple[World, Path, bytes], target: SQLiteStore
) -> None:
    world, path, data = archived
    before = await dump_of(target, world)
    with pytest.raises(CorruptArchiveError, match="the limit is"):
        await verify_archive(path, max_inflated_bytes=len(data))
    with pytest.raises(CorruptArchiveError, match="the limit is"):
        await restore_archive(target, path, max_inflated_bytes=len(data))
    assert await dump_of(target, world) == before
    manifest = await restore_archive(target, path, max_inflated_bytes=10 * 1024 * 1024)
    assert manifest.session_id == world.id("s")


async def test_a_conversation_by_reference_restores_whole(
    source: SQLiteStore, target: SQLiteStore, tmp_path: Path
) -> None:
    """[A1] [V2] a session's history references travel inside its archive: the restored
    newest turn replays the whole conversation from the restored runs alone."""
    from agentledger.storage.conformance._references import _turn
    from agentledger.storage.replay import build_messages_from_run_log

    world = World(source)
    sid = await world.session("chat")
    previous = ""
    for i in range(5):
        previous = (await _turn(world, f"t{i}", sid, f"m{i}", after=previous)).run.run_id
    expected = await build_messages_from_run_log(source, previous)
    await source.end_session(sid, ended_at=world.now())
    path = tmp_path / "chat.alarchive"
    await archive_session(source, sid, path)
    await restore_archive(target, path)
    assert await build_messages_from_run_log(target, previous) == expected
    assert len(expected) == 10


def _version_1(data: bytes, image: SessionImage) -> bytes:
    """``data`` (an archive of ``image``, which holds no messages) as agentledger wrote it
    before messages existed: format version 1, no message counts, no messages in the body."""
    _, manifest, _ = data.split(b"\n", 2)
    fields = msgspec.json.decode(manifest)
    assert (fields.pop("messages"), fields.pop("message_bytes")) == (0, 0)
    del fields["run_through"], fields["copied_from"]
    fields["format_version"] = 1
    body = {f: getattr(image, f) for f in ("session", "runs", "records", "checkpoints")}
    return _rechecksummed(
        b"agentledger-archive 1\n"
        + msgspec.json.encode(fields)
        + b"\n"
        + zlib.compress(msgspec.msgpack.encode(body), 6)
    )


async def test_an_archive_from_before_messages_still_restores(
    archived: tuple[World, Path, bytes], target: SQLiteStore, tmp_path: Path
) -> None:
    """[A1] a version 1 archive (no messages anywhere) verifies and restores as before; one
    whose body carries messages all the same is refused."""
    world, _, data = archived
    image = await read_session_image(world.store, world.id("s"))
    old = tmp_path / "old.alarchive"
    old.write_bytes(_version_1(data, image))
    manifest = await verify_archive(old)
    assert (manifest.format_version, manifest.messages) == (1, 0)
    assert manifest.session_digest == session_digest(image)
    before = await world.dump()
    await restore_archive(target, old)
    assert await dump_of(target, world) == before
    magic, head, _ = _version_1(data, image).split(b"\n", 2)
    body = {f: getattr(image, f) for f in ("session", "runs", "records", "checkpoints")}
    body["messages"] = []
    smuggled = tmp_path / "smuggled.alarchive"
    smuggled.write_bytes(
        _rechecksummed(magic + b"\n" + head + b"\n" + zlib.compress(msgspec.msgpack.encode(body)))
    )
    fresh = World(world.store, namespace=world.ns)
    fresh.session_ids, fresh.run_ids = world.session_ids, world.run_ids
    assert "field 'messages'" in (await _refused(smuggled, target, fresh)).reason


async def test_an_archive_carries_the_sessions_messages(
    source: SQLiteStore, target: SQLiteStore, tmp_path: Path
) -> None:
    """[A1] [Q1] queued, interrupting and started messages travel in the archive (format
    version 2), counted in its manifest and covered by its digest, which is the purge
    receipt's; the restore shows them as the source did."""
    world = World(source)
    sid = await messaged_session(world, "chat")
    messages = await source.list_session_messages(sid)
    path = tmp_path / "chat.alarchive"
    manifest = await archive_session(source, sid, path)
    assert (manifest.format_version, manifest.messages) == (3, 3)
    assert manifest.message_bytes == sum(len(m.message) for m in messages)
    before = await world.dump()
    receipt = await source.purge_session(sid)
    assert (receipt.digest, receipt.messages) == (manifest.session_digest, 3)
    assert await restore_archive(target, path) == manifest
    assert await dump_of(target, world) == before
    assert await target.list_session_messages(sid) == messages
    assert [m.run_id for m in await target.load_pending_messages(sid)] == [
        m.run_id for m in messages[1:]
    ]
    # A changed message changes the digest: a forged body is refused against its manifest.
    image = await read_session_image(target, sid)
    changed = msgspec.structs.replace(
        image.messages[1], message=image.messages[1].message.replace(b"stop", b"STOP")
    )
    body = {f: getattr(image, f) for f in ("session", "runs", "records", "checkpoints")}
    body["messages"] = [image.messages[0], changed, image.messages[2]]
    data = path.read_bytes()
    forged = tmp_path / "forged.alarchive"
    forged.write_bytes(_with_body(data, zlib.compress(msgspec.msgpack.encode(body))))
    with pytest.raises(CorruptArchiveError, match="session_digest"):
        await verify_archive(forged)


def _version_2(data: bytes) -> bytes:
    """``data`` as agentledger wrote it before manifests named their records and sources:
    format version 2, the body unchanged."""
    _, manifest, body = data.split(b"\n", 2)
    fields = msgspec.json.decode(manifest)
    del fields["run_through"], fields["copied_from"]
    fields["format_version"] = 2
    head = b"agentledger-archive 2\n" + msgspec.json.encode(fields) + b"\n"
    return _rechecksummed(head + body[: len(body) - len(b"sha256:") - 65])


async def test_an_archive_names_its_records_and_where_copied_history_came_from(
    source: SQLiteStore, target: SQLiteStore, tmp_path: Path
) -> None:
    """[G2] the manifest names each run's last record and the source (session, run, record)
    of a fork's copied history; a manifest naming another source is refused; an archive of
    format version 2 (neither named) still verifies and restores."""
    world = World(source)
    origin = await world.session("origin")
    root = await world.root("origin-root", session=origin)
    await world.finish(root)
    holder = await world.session("holder")
    fork = world.run("fork", session=holder)
    copied = CopiedFrom(session_id=origin, run_id=root.run.run_id, through="2")
    record = fork.record(HISTORY_COPIED, copied.encode(), event_key="copied", at=world.now())
    await source.start_root_run(msgspec.structs.replace(fork.root_start(), records=(record,)))
    await world.finish(fork)
    await source.end_session(holder, ended_at=world.now())
    path = tmp_path / "holder.alarchive"
    manifest = await archive_session(source, holder, path)
    image = await read_session_image(source, holder)
    last = [r.id for r in image.records if r.run_id == fork.run.run_id][-1]
    assert manifest.run_through == {fork.run.run_id: last}
    assert manifest.copied_from == [copied]
    assert await verify_archive(path) == manifest
    magic, head, rest = path.read_bytes().split(b"\n", 2)
    forged = head.replace(origin.encode(), b"elsewhere")
    assert forged != head
    bad = tmp_path / "forged.alarchive"
    bad.write_bytes(_rechecksummed(magic + b"\n" + forged + b"\n" + rest[: -len(b"sha256:") - 65]))
    with pytest.raises(CorruptArchiveError) as refused:
        await verify_archive(bad)
    assert "copied_from" in refused.value.reason
    old = tmp_path / "old.alarchive"
    old.write_bytes(_version_2(path.read_bytes()))
    older = await verify_archive(old)
    assert (older.format_version, older.run_through, older.copied_from) == (2, {}, [])
    assert older.session_digest == manifest.session_digest
    await restore_archive(target, old)
    assert (await target.load_session(holder)).id == holder
