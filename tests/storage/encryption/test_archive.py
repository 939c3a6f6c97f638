"""[A2] x [A1] an encrypted session's archive is sealed under its data key: erasure reaches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentledger.errors import SessionKeyErasedError, ValidationError
from agentledger.storage.archive import archive_session, restore_archive, verify_archive
from agentledger.storage.conformance import World, dump_store
from tests.storage.encryption.test_sqlite import SECRETS, Files, populate


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


async def test_an_archive_made_before_erasure_becomes_unreadable(
    files: Files, tmp_path: Path
) -> None:
    """Sealed and verifiable with the keys; after erasure neither verify nor restore reads it."""
    store = await files.open()
    world = World(store)
    sid, run_id = await populate(store, world, "s")
    await store.end_session(sid, ended_at=world.now())
    before = await dump_store(store, [sid], [run_id])
    archive = tmp_path / "s.alarchive"
    manifest = await archive_session(store, sid, archive)
    assert manifest.sealed
    assert not any(secret in archive.read_bytes() for secret in SECRETS)
    assert (await verify_archive(archive, files.encryption())).session_digest == (
        manifest.session_digest
    )
    with pytest.raises(ValidationError):  # a sealed archive needs the keyring and vault
        await verify_archive(archive)

    assert await dump_store(store, [sid], [run_id]) == before

    assert await store.erase_session_keys(sid)
    await store.close()
    with pytest.raises(SessionKeyErasedError):
        await verify_archive(archive, files.encryption())
    fresh = await files.open(tmp_path / "fresh.db")
    with pytest.raises(SessionKeyErasedError):
        await restore_archive(fresh, archive)
    assert (await fresh.list_sessions()).sessions == []  # refused: nothing written
    await fresh.close()


async def test_a_sealed_archive_restores_byte_for_byte_while_the_key_lives(
    files: Files, tmp_path: Path
) -> None:
    """Archive, purge, restore into another encrypted file on the same vault: the same dump."""
    store = await files.open()
    world = World(store)
    sid, run_id = await populate(store, world, "s")
    await store.end_session(sid, ended_at=world.now())
    before = await dump_store(store, [sid], [run_id])
    archive = tmp_path / "s.alarchive"
    manifest = await archive_session(store, sid, archive)
    receipt = await store.purge_session(sid)
    assert receipt.digest == manifest.session_digest
    await store.close()

    elsewhere = await files.open(tmp_path / "elsewhere.db")
    assert await restore_archive(elsewhere, archive) == manifest
    assert await dump_store(elsewhere, [sid], [run_id]) == before
    await elsewhere.close()
    raw = (tmp_path / "elsewhere.db").read_bytes()
    assert not any(secret in raw for secret in SECRETS)  # restored records are sealed again
