"""[A2] encryption at rest on SQLite: no plaintext in the file, erasure, rotation, refusals."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.errors import CorruptRecordError, SessionKeyErasedError, ValidationError
from agentledger.runtime import user_message
from agentledger.storage import Checkpoint, RunStatus
from agentledger.storage.conformance import World, dump_store
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.integrity import record_checksum, run_seed
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import decode_messages
from tests.runtime.support import chat_runtime, valid_transcript
from tests.runtime.test_tool_loop import weather
from tests.storage.damage import assert_every_read_refuses, write_log

SECRETS = [b"PAYLOAD-SECRET-alpha", b"PAYLOAD-SECRET-beta", b"CHECKPOINT-SECRET-gamma"]


class Files:
    """A database path, a keyring and a vault path in one temporary folder."""

    def __init__(self, folder: Path) -> None:
        self.db = folder / "ledger.db"
        self.vault = folder / "keys.vault"
        self.keyring = Keyring.generate("k1")

    def encryption(self, keyring: Keyring | None = None) -> Encryption:
        return Encryption(keyring or self.keyring, self.vault)

    async def open(self, path: Path | None = None, keyring: Keyring | None = None) -> SQLiteStore:
        return await SQLiteStore.open(path or self.db, encryption=self.encryption(keyring))


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


@pytest.fixture
async def store(files: Files) -> AsyncIterator[SQLiteStore]:
    handle = await files.open()
    yield handle
    await handle.close()


async def populate(store: Any, world: World, name: str) -> tuple[str, str]:
    """A session whose run holds the known secrets in payloads and its checkpoint."""
    sid = await world.session(name)
    run = await world.root(f"{name}-run", session=sid)
    for i, secret in enumerate(SECRETS[:2]):
        record = run.record("note", b'{"text": "%s"}' % secret, event_key=f"n{i}", at=world.now())
        await store.append_run_record(record)
    checkpoint = Checkpoint(id="cp", data=b'{"state": "%s"}' % SECRETS[2])
    await store.record_run_suspension(run.suspension(checkpoint, at=world.now()))
    return sid, run.run.run_id


def raw_bytes(db: Path) -> bytes:
    """Every byte of the database file and its WAL, as a thief would copy them."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


async def test_the_file_holds_no_plaintext(tmp_path: Path) -> None:
    """The grep finds the secrets in a plaintext database, and none in an encrypted one."""
    for encrypted in (False, True):
        files = Files(tmp_path / str(encrypted))
        files.db.parent.mkdir()
        store = await (files.open() if encrypted else SQLiteStore.open(files.db))
        world = World(store)
        _, run_id = await populate(store, world, "s")
        assert (await store.load_run_suspension(run_id)).data.endswith(SECRETS[2] + b'"}')
        await store.close()
        found = [secret in raw_bytes(files.db) for secret in SECRETS]
        assert found == [not encrypted] * len(SECRETS), encrypted
        if encrypted:
            assert not any(secret in files.vault.read_bytes() for secret in SECRETS)


async def test_records_carried_by_lifecycle_commands_are_sealed(tmp_path: Path) -> None:
    """A start's and a suspension's carried records are sealed like appended ones."""
    carried = [b"CARRIED-SECRET-start", b"CARRIED-SECRET-suspension"]
    for encrypted in (False, True):
        files = Files(tmp_path / str(encrypted))
        files.db.parent.mkdir()
        store = await (files.open() if encrypted else SQLiteStore.open(files.db))
        world = World(store)
        run = world.run("r", session=await world.session("s"))
        first, last = (
            run.record("note", b'{"text": "%s"}' % secret, event_key=f"n{i}", at=world.now())
            for i, secret in enumerate(carried)
        )
        await store.start_root_run(msgspec.structs.replace(run.root_start(), records=(first,)))
        suspension = run.suspension(Checkpoint(id="cp", data=b"{}"), at=world.now())
        await store.record_run_suspension(msgspec.structs.replace(suspension, records=(last,)))
        listed = (await store.list_run_records(run.run.run_id)).records
        assert [r.payload for r in listed[1:3]] == [first.payload, last.payload]
        await store.close()
        found = [secret in raw_bytes(files.db) for secret in carried]
        assert found == [not encrypted] * len(carried), encrypted


def wrapped_key(vault: Path, session_id: str) -> bytes:
    with sqlite3.connect(vault) as conn:
        (wrapped,) = conn.execute(
            "SELECT wrapped FROM data_keys WHERE scope = ?", (f"session:{session_id}",)
        ).fetchone()
    conn.close()
    assert isinstance(wrapped, bytes)
    return wrapped


async def erased_everywhere(store: SQLiteStore, sid: str, run_id: str) -> None:
    for read in (
        lambda: store.list_run_records(run_id),
        lambda: store.list_session_run_records(sid),
        lambda: store.load_run_suspension(run_id),
    ):
        with pytest.raises(SessionKeyErasedError) as caught:
            await read()
        assert caught.value.session_id == sid


async def test_erasure_reaches_backups_made_before(files: Files) -> None:
    """Erase one session's key: it is unreadable live and in an older backup; the other is not."""
    store = await files.open()
    world = World(store)
    gone, gone_run = await populate(store, world, "gone")
    kept, kept_run = await populate(store, world, "kept")
    kept_before = await dump_store(store, [kept], [kept_run])
    await store.close()
    backup = files.db.with_name("backup.db")
    shutil.copyfile(files.db, backup)
    key_bytes = wrapped_key(files.vault, gone)
    assert key_bytes in files.vault.read_bytes()

    store = await files.open()
    assert await store.erase_session_keys(gone) is True
    assert await store.erase_session_keys(gone) is False
    await erased_everywhere(store, gone, gone_run)
    assert await dump_store(store, [kept], [kept_run]) == kept_before
    late = world.run("gone-run", session=gone)
    with pytest.raises(SessionKeyErasedError):  # no new data under an erased session
        await store.append_run_record(late.record("note", b"{}", event_key="late", at=world.now()))
    await store.end_session(gone, ended_at=world.now())
    receipt = await store.purge_session(gone)  # erase, then purge: the GDPR order works
    assert (receipt.runs, receipt.records, receipt.checkpoints) == (1, 4, 1)
    await store.close()

    restored = await files.open(backup)
    await erased_everywhere(restored, gone, gone_run)
    assert await dump_store(restored, [kept], [kept_run]) == kept_before
    await restored.close()
    assert key_bytes not in files.vault.read_bytes()


async def test_rotation_rewraps_keys_and_rewrites_no_record(files: Files) -> None:
    """Rotate to a new KEK, retire the old one: everything reads, no stored record changed."""
    store = await files.open()
    world = World(store)
    sid, run_id = await populate(store, world, "s")
    before = await dump_store(store, [sid], [run_id])
    await store.close()

    def stored() -> list[Any]:
        with sqlite3.connect(files.db) as conn:
            rows = conn.execute("SELECT run_id, seq, payload, checksum FROM records ORDER BY pos")
            out: list[Any] = [*rows, *conn.execute("SELECT * FROM checkpoints")]
        conn.close()
        return out

    raw = stored()
    rotated = files.keyring.with_key("k2")
    retired = rotated.without("k1")
    with pytest.raises(ValidationError) as refused:  # k1 still wraps a data key
        await files.open(keyring=retired)
    assert refused.value.field == "keyring"
    store = await files.open(keyring=rotated)
    assert await store.rotate_keys() == 1
    assert await store.rotate_keys() == 0
    await store.close()

    store = await files.open(keyring=retired)
    assert await dump_store(store, [sid], [run_id]) == before
    await store.close()
    assert stored() == raw


async def test_opening_refuses_a_mismatch(files: Files, tmp_path: Path) -> None:
    """Encrypted without a keyring, plaintext data with one, another vault: clear refusals."""
    store = await files.open()
    await populate(store, World(store), "s")
    await store.close()
    with pytest.raises(ValidationError) as caught:
        await SQLiteStore.open(files.db)
    assert caught.value.field == "encryption"
    with pytest.raises(ValidationError) as caught:
        await SQLiteStore.open_read_only(files.db)
    assert caught.value.field == "encryption"
    with pytest.raises(ValidationError) as caught:
        await SQLiteStore.open(files.db, encryption=Encryption(files.keyring, tmp_path / "other"))
    assert caught.value.field == "vault"

    plain = tmp_path / "plain.db"
    store = await SQLiteStore.open(plain)
    await populate(store, World(store), "s")
    await store.close()
    with pytest.raises(ValidationError) as caught:
        await SQLiteStore.open(plain, encryption=files.encryption())
    assert caught.value.field == "encryption"
    store = await SQLiteStore.open(plain)  # refused unchanged: still a plaintext database
    with pytest.raises(ValidationError):
        await store.erase_session_keys("s")
    await store.close()

    reader = await SQLiteStore.open_read_only(files.db, encryption=files.encryption())
    assert len((await reader.list_sessions()).sessions) == 1
    await reader.close()


async def test_a_moved_or_damaged_ciphertext_is_corrupt(store: SQLiteStore, files: Files) -> None:
    """A sealed payload copied onto another record (checksum fixed) does not open: corrupt."""
    world = World(store)
    sid, run_id = await populate(store, world, "s")
    await store.close()
    with sqlite3.connect(files.db) as conn:
        rows = conn.execute(
            "SELECT seq, agent_id, turn_id, event_key, type, timestamp, payload FROM records "
            "WHERE run_id = ? ORDER BY seq",
            (run_id,),
        ).fetchall()
        seq, agent_id, turn_id, event_key, type_, ms, _ = rows[2]
        moved = rows[1][6]
        checksum = record_checksum(
            run_seed(run_id, agent_id, sid), seq, turn_id, event_key, type_, ms, moved
        )
        conn.execute(
            "UPDATE records SET payload = ?, checksum = ? WHERE run_id = ? AND seq = ?",
            (moved, checksum, run_id, seq),
        )
    conn.close()
    reopened = await files.open()
    for read in (reopened.list_run_records, reopened.verified_transcript_payloads):
        with pytest.raises(CorruptRecordError) as caught:
            await read(run_id)
        assert (caught.value.run_id, caught.value.record_id) == (run_id, str(seq))
    await reopened.close()


async def test_an_agent_run_on_an_encrypted_store(store: SQLiteStore, files: Files) -> None:
    """A tool loop runs, retries nothing twice, and its transcript replays from sealed records."""
    await store.create_session("chat", created_at=World(store).now())
    model = ScriptedModel([tool_calls(("c1", "weather", {"city": "Oslo"})), reply("Oslo: 21C.")])
    runtime = chat_runtime(store, model, tools=[weather])
    out = await runtime.agent_client("chat").run("chat", [user_message("Weather in Oslo?")])
    assert out.status is RunStatus.COMPLETED
    assert store.transcripts_verified  # replay reads the whole log, opening every payload
    messages = await valid_transcript(store, out.run_id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    payloads = await store.verified_transcript_payloads(out.run_id)
    assert [m for p in payloads for m in decode_messages(p)] == messages
    page = await store.list_run_records(out.run_id, limit=3)
    retry = page.records[1]
    again = await store.append_run_record(msgspec.structs.replace(retry, id=""))
    assert (again.id, again.inserted) == (retry.id, False)  # [X1] the exact retry on plaintext
    assert b"Oslo" not in raw_bytes(files.db)


async def test_an_erasure_by_another_process_holds_for_a_running_store(files: Files) -> None:
    """A store that already used a key stops reading it once another vault owner erased it."""
    serving = await files.open()  # as `agentledger serve` would hold it
    sid, run_id = await populate(serving, World(serving), "s")
    assert len((await serving.list_run_records(run_id)).records) == 4  # the key is in memory
    other = await files.open()  # its own Encryption: as `agentledger keys erase` in a shell
    assert await other.erase_session_keys(sid)
    await other.close()
    with pytest.raises(SessionKeyErasedError):
        await serving.list_run_records(run_id)
    await serving.close()


async def test_a_key_made_by_another_process_keeps_the_keys_in_memory(files: Files) -> None:
    """Only an erasure makes a running store forget its keys: a new session's key, made by
    another vault owner, does not send it back to the vault. Proof: with the vault locked
    by a writer, the store still reads the run whose key it holds."""
    serving = await files.open()
    sid, run_id = await populate(serving, World(serving), "s")
    assert len((await serving.list_run_records(run_id)).records) == 4  # the key is in memory
    other = await files.open()
    await populate(other, World(other), "t")  # another session: a new key in the vault
    await other.close()
    lock = sqlite3.connect(files.vault, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # no connection can read the vault meanwhile
        page = await asyncio.wait_for(serving.list_run_records(run_id), 60)
        assert len(page.records) == 4
    finally:
        lock.close()
    assert await serving.erase_session_keys(sid)  # and an erasure still holds at once
    with pytest.raises(SessionKeyErasedError):
        await serving.list_run_records(run_id)
    await serving.close()


ENCRYPTED_DAMAGE = {
    "turn id": "turn_id = 'other-turn'",
    "timestamp": "timestamp = timestamp + 1",
    "sealed payload": "payload = substr(payload, 1, length(payload) - 1)",
    "checksum": "checksum = checksum + 1",
}
"""Damage the associated data does not cover (turn id, timestamp), the sealed bytes, and
the checksum itself: each is still found by the checksum, before any opening."""


@pytest.mark.parametrize("column", list(ENCRYPTED_DAMAGE))
async def test_a_damaged_sealed_record_is_refused_on_every_read_path(
    store: SQLiteStore, column: str
) -> None:
    log = await write_log(World(store))
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        sql = f"UPDATE records SET {ENCRYPTED_DAMAGE[column]} WHERE run_id = ? AND seq = 3"
        assert conn.execute(sql, (log.run_id,)).rowcount == 1
    finally:
        conn.close()
    await assert_every_read_refuses(store, log, 3, "checksum mismatch")


async def test_a_conversation_by_reference_replays_sealed(files: Files) -> None:
    """[A2] [V4] references are sealed like any record; the chain replays through them."""
    from agentledger.storage.conformance._references import _turn
    from agentledger.storage.replay import build_messages_from_run_log

    store = await files.open()
    world = World(store)
    sid = await world.session("chat")
    previous = ""
    for i in range(4):
        secret = SECRETS[i % len(SECRETS)].decode()
        previous = (await _turn(world, f"t{i}", sid, secret, after=previous)).run.run_id
    replayed = await build_messages_from_run_log(store, previous)
    await store.close()
    assert [m.parts[0].text for m in replayed[::2]] == [  # type: ignore[union-attr]
        SECRETS[i % len(SECRETS)].decode() for i in range(4)
    ]
    assert not any(secret in raw_bytes(files.db) for secret in SECRETS)


async def test_handles_opening_a_new_encrypted_file_at_once_agree_on_its_marker(
    tmp_path: Path,
) -> None:
    """Racing handles on one new file record the encryption marker once; none is refused."""
    keyring = Keyring.generate("k1")
    for attempt in range(12):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        files = Files(folder)
        files.keyring = keyring
        handles = await asyncio.gather(*(files.open() for _ in range(4)))
        for handle in handles:
            await handle.close()
        with sqlite3.connect(files.db) as conn:
            assert conn.execute("SELECT count(*) FROM encryption").fetchone() == (1,)
