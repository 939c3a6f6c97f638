"""SQLiteStore.open_read_only: reads see live commits, writes are refused, files stay as found."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentledger.errors import SchemaVersionError, ValidationError
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.schema import MIGRATIONS_TABLE

AT = datetime(2026, 1, 1, tzinfo=UTC)


async def test_reads_follow_a_writer_and_writes_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    writer = await SQLiteStore.open(path)
    reader = await SQLiteStore.open_read_only(path)
    try:
        await writer.create_session("s-1", created_at=AT)
        assert [s.id for s in (await reader.list_sessions()).sessions] == ["s-1"]
        await writer.create_session("s-2", created_at=AT)  # a commit after the reader opened
        assert [s.id for s in (await reader.list_sessions()).sessions] == ["s-2", "s-1"]
        with pytest.raises(ValidationError) as refused:
            await reader.end_session("s-1", ended_at=AT)
        assert refused.value.field == "store"
        assert (await writer.load_session("s-1")).ended_at is None
    finally:
        await reader.close()
        await writer.close()


async def test_an_older_schema_is_refused_not_migrated(tmp_path: Path) -> None:
    """Reading never migrates: a database one migration behind is refused as it is."""
    path = tmp_path / "old.db"
    async with await SQLiteStore.open(path):
        pass
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE version = 2")
        conn.execute("DROP INDEX runs_by_session_status")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(SchemaVersionError) as refused:
        await SQLiteStore.open_read_only(path)
    assert refused.value.field == "schema_version"
    assert (refused.value.current, refused.value.pending) == (1, (2,))
    assert "1 migration pending" in str(refused.value)
    assert path.read_bytes() == before
