"""[A2] x [A1] an encrypted session's archive is sealed under its data key: erasure reaches it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import SessionKeyErasedError, ValidationError
from agentledger.service import StoreClient
from agentledger.storage.archive import archive_session, restore_archive, verify_archive
from agentledger.storage.conformance import World, dump_store
from agentledger.storage.conformance._import import messaged_session
from tests.cli.conftest import run_cli
from tests.service.process import ServiceProcess, Tokens
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


async def test_an_archive_made_through_a_served_encrypted_store_is_sealed(
    files: Files, tmp_path: Path
) -> None:
    """Through StoreClient, `serve --keyring --vault` builds the sealed archive: no plaintext in
    it, the same file as beside the store; it restores while the key lives, not after erasure."""
    ring = tmp_path / "keyring.json"
    ring.write_text(files.keyring.to_json())
    store = await files.open()
    world = World(store)
    sid, run_id = await populate(store, world, "s")
    await store.end_session(sid, ended_at=world.now())
    before = await dump_store(store, [sid], [run_id])
    beside = await archive_session(store, sid, tmp_path / "beside.alarchive")
    await store.close()
    tokens = Tokens(tmp_path / "tokens.json")
    options = ("--keyring", str(ring), "--vault", str(files.vault))
    archive = tmp_path / "served.alarchive"
    with ServiceProcess(str(files.db), tokens.path, options=options) as service:
        async with StoreClient(service.url, token=tokens.host) as client:
            manifest = await archive_session(client, sid, archive)
            assert await archive_session(client, sid, archive) == manifest  # kept: the same
    assert manifest.sealed
    assert not any(secret in archive.read_bytes() for secret in SECRETS)
    # The same archive as one made beside the store, but for its creation time.
    assert msgspec.structs.replace(manifest, created_at=beside.created_at) == beside
    assert await verify_archive(archive, files.encryption()) == manifest

    fresh = tmp_path / "fresh.db"
    with ServiceProcess(str(fresh), tokens.path, options=options) as service:
        async with StoreClient(service.url, token=tokens.host) as client:
            assert await restore_archive(client, archive) == manifest
            assert await dump_store(client, [sid], [run_id]) == before
            erased = await asyncio.to_thread(
                run_cli, "--db", str(fresh), "keys", "erase", sid, *options
            )
            assert erased.code == 0, erased.err
            with pytest.raises(SessionKeyErasedError):
                await client.export_archive(sid)
            await client.purge_session(sid)
            with pytest.raises(SessionKeyErasedError):  # refused before the purged id is
                await restore_archive(client, archive)
    assert not any(secret in fresh.read_bytes() for secret in SECRETS)
    with pytest.raises(SessionKeyErasedError):
        await verify_archive(archive, files.encryption())


async def test_a_sealed_archive_keeps_the_messages_sealed(files: Files, tmp_path: Path) -> None:
    """[A2] [Q1] an encrypted session's messages travel only inside the sealed body, and a
    restore into another encrypted file seals them again: no message text in plaintext."""
    secret = b"hello from msgs-m"  # the text of two of the messages; b"stop, caf" the other
    store = await files.open()
    world = World(store)
    sid = await messaged_session(world)
    messages = await store.list_session_messages(sid)
    assert sum(secret in m.message for m in messages) == 2
    archive = tmp_path / "s.alarchive"
    manifest = await archive_session(store, sid, archive)
    assert manifest.sealed
    assert manifest.messages == 3
    assert secret not in archive.read_bytes()
    assert b"stop, caf" not in archive.read_bytes()
    receipt = await store.purge_session(sid)
    assert receipt.digest == manifest.session_digest
    await store.close()

    elsewhere = await files.open(tmp_path / "elsewhere.db")
    assert await restore_archive(elsewhere, archive) == manifest
    assert await elsewhere.list_session_messages(sid) == messages
    await elsewhere.close()
    raw = (tmp_path / "elsewhere.db").read_bytes()
    assert secret not in raw
    assert b"stop, caf" not in raw
