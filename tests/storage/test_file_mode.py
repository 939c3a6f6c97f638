"""Files a store creates are owner-only (0600) unless ``AGENTLEDGER_FILE_MODE`` says otherwise."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agentledger.errors import ValidationError
from agentledger.storage.file_mode import FILE_MODE_ENV, file_mode
from agentledger.storage.sqlite import SQLiteStore


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_database_and_its_wal_are_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    async with await SQLiteStore.open(db) as store:
        await store.create_session("s")
        assert (_mode(db), _mode(Path(f"{db}-wal"))) == (0o600, 0o600)


async def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    db.touch(mode=0o640)
    db.chmod(0o640)
    async with await SQLiteStore.open(db):
        pass
    assert _mode(db) == 0o640


def test_the_mode_is_configured_in_octal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FILE_MODE_ENV, "0640")
    assert file_mode() == 0o640
    for bad in ("rw-r-----", "0777", "9"):
        monkeypatch.setenv(FILE_MODE_ENV, bad)
        with pytest.raises(ValidationError) as caught:
            file_mode()
        assert caught.value.field == FILE_MODE_ENV
