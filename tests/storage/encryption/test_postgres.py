"""[A2] encryption at rest on PostgreSQL: no plaintext in the table files, erasure, rotation."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agentledger.errors import SessionKeyErasedError, ValidationError
from agentledger.storage.conformance import World, dump_store
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.postgres import PostgresStore
from tests.conditions import until
from tests.storage.encryption.test_sqlite import SECRETS, populate
from tests.storage.postgres.server import create_database, drop_database
from tests.storage.sqlite._ticks import loop_ticks


@pytest.fixture
def fresh_dsn(postgres_dsn: str) -> Iterator[str]:
    dsn = create_database(postgres_dsn, prefix="agentledger_crypto")
    try:
        yield dsn
    finally:
        drop_database(dsn)


def table_files(dsn: str) -> bytes:
    """The bytes of the records and runs tables' files on the server's disk, after a checkpoint."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        out = b""
        for table in ("agentledger_records", "agentledger_runs"):
            row = conn.execute(
                "SELECT pg_read_binary_file(pg_relation_filepath(%s::regclass))", (table,)
            ).fetchone()
            assert row is not None
            out += bytes(row[0])
    return out


async def test_the_table_files_hold_no_plaintext(
    fresh_dsn: str, postgres_dsn: str, tmp_path: Path
) -> None:
    """The grep finds the secrets in a plaintext database's files, and none in an encrypted one."""
    plain_dsn = create_database(postgres_dsn, prefix="agentledger_plain")
    try:
        for dsn, encryption in (
            (plain_dsn, None),
            (fresh_dsn, Encryption(Keyring.generate(), tmp_path / "keys.vault")),
        ):
            store = await PostgresStore.open(dsn, encryption=encryption)
            await populate(store, World(store), "s")
            await store.close()
            found = [secret in table_files(dsn) for secret in SECRETS]
            assert found == [encryption is None] * len(SECRETS)
    finally:
        drop_database(plain_dsn)


async def test_erasure_and_rotation(fresh_dsn: str, tmp_path: Path) -> None:
    """Erase one session: typed errors for it, the other intact; rotate and retire the old KEK."""
    keyring = Keyring.generate("k1")
    vault = tmp_path / "keys.vault"
    store = await PostgresStore.open(fresh_dsn, encryption=Encryption(keyring, vault))
    world = World(store)
    gone, gone_run = await populate(store, world, "gone")
    kept, kept_run = await populate(store, world, "kept")
    kept_before = await dump_store(store, [kept], [kept_run])
    assert await store.erase_session_keys(gone) is True
    for read in (
        lambda: store.list_run_records(gone_run),
        lambda: store.list_session_run_records(gone),
        lambda: store.load_run_suspension(gone_run),
    ):
        with pytest.raises(SessionKeyErasedError) as caught:
            await read()
        assert caught.value.session_id == gone
    await store.close()

    with pytest.raises(ValidationError) as refused:
        await PostgresStore.open(fresh_dsn)
    assert refused.value.field == "encryption"
    rotated = keyring.with_key("k2")
    store = await PostgresStore.open(fresh_dsn, encryption=Encryption(rotated, vault))
    assert await store.rotate_keys() == 1
    await store.close()
    retired = Encryption(rotated.without("k1"), vault)
    store = await PostgresStore.open(fresh_dsn, encryption=retired)
    assert await dump_store(store, [kept], [kept_run]) == kept_before
    with pytest.raises(SessionKeyErasedError):
        await store.list_run_records(gone_run)
    await store.close()


async def test_a_locked_vault_delays_the_operation_not_the_event_loop(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """Data keys are read from the vault (a SQLite file) in a thread: while another process holds
    the vault locked, the operation waits, and the loop's other tasks keep running."""
    keyring = Keyring.generate()
    vault = tmp_path / "keys.vault"
    async with await PostgresStore.open(
        fresh_dsn, min_size=1, max_size=2, encryption=Encryption(keyring, vault)
    ) as writer:
        sid, run_id = await populate(writer, World(writer), "s")
    # Another process: nothing in memory yet, so its first read needs the session's key.
    async with await PostgresStore.open(
        fresh_dsn, min_size=1, max_size=2, encryption=Encryption(keyring, vault)
    ) as reader:
        locker = sqlite3.connect(vault, isolation_level=None)
        try:
            async with loop_ticks() as ticks:
                locker.execute("BEGIN EXCLUSIVE")  # as a `keys erase` or a key being made does
                reading = asyncio.create_task(reader.list_run_records(run_id))
                # A read of the vault on the loop would hold it until the vault's busy timeout
                # and then fail: the loop's turns would come only after the read was done.
                await until(lambda: ticks.count >= 20 or reading.done(), "twenty loop turns")
                assert not reading.done()  # the read waits for the vault, the loop does not
            locker.execute("ROLLBACK")
        finally:
            locker.close()
        page = await reading
    assert SECRETS[0] in page.records[1].payload
    assert sid
