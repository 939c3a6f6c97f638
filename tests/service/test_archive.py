"""[A1] Archives move between backends: SQLite -> PostgreSQL -> the store service, and back."""

from __future__ import annotations

from pathlib import Path

from agentledger.service import StoreClient
from agentledger.storage.archive import archive_session, restore_archive, verify_archive
from agentledger.storage.conformance import World, dump_store
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from tests.service.process import ServiceProcess, Tokens
from tests.storage.archived import ended_session


async def test_an_archive_moves_sqlite_to_postgres_to_the_service(
    tmp_path: Path, postgres_dsn: str, sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    async with await SQLiteStore.open(tmp_path / "first.db") as sqlite:
        world = World(sqlite)
        sid = await ended_session(world, "moving")
        before = await world.dump()
        first = await archive_session(sqlite, sid, tmp_path / "from-sqlite.alarchive")
        receipt = await sqlite.purge_session(sid)
        assert receipt.digest == first.session_digest

    async def dumped(store: object) -> dict[str, object]:
        return await dump_store(store, world.session_ids, world.run_ids)  # type: ignore[arg-type]

    postgres = await PostgresStore.open(postgres_dsn)
    try:
        assert await restore_archive(postgres, tmp_path / "from-sqlite.alarchive") == first
        assert await dumped(postgres) == before
        second = await archive_session(postgres, sid, tmp_path / "from-postgres.alarchive")
    finally:
        await postgres.close()
    assert second.session_digest == first.session_digest
    assert second.run_digests == first.run_digests

    async with StoreClient(sqlite_service.url, token=tokens.host) as client:
        assert await restore_archive(client, tmp_path / "from-postgres.alarchive") == second
        assert await dumped(client) == before
        third = await archive_session(client, sid, tmp_path / "from-service.alarchive")
        assert third.session_digest == first.session_digest
        assert (await client.purge_session(sid)).digest == first.session_digest
    assert await verify_archive(tmp_path / "from-service.alarchive") == third

    async with await SQLiteStore.open(tmp_path / "back.db") as back:
        await restore_archive(back, tmp_path / "from-service.alarchive")
        assert await dumped(back) == before
