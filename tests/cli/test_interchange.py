"""`agentledger export` and `import`: the portable format, archives, encrypted stores."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentledger.storage.conformance import World
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import run_cli
from tests.storage.archived import ended_session
from tests.storage.encryption.test_sqlite import populate


def _store_with(db: Path, name: str) -> str:
    async def write() -> str:
        async with await SQLiteStore.open(db) as store:
            return await ended_session(World(store, namespace="cli"), name)

    return asyncio.run(write())


def test_export_then_import_into_a_new_database(tmp_path: Path) -> None:
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    sid = _store_with(source, "kept")
    out = tmp_path / "kept.jsonl"
    assert run_cli("--db", str(source), "export", sid, "-o", str(out)).code == 0
    printed = run_cli("--db", str(source), "export", sid, "--format", "jsonl")
    assert printed.out.encode() == out.read_bytes()
    assert json.loads(printed.out.splitlines()[0])["session"]["id"] == sid
    again = run_cli("--db", str(source), "export", sid, "-o", str(out))
    assert again.code == 1  # an existing file is never overwritten
    assert str(out) in again.err

    missing = run_cli("--db", str(target), "import", str(out))
    assert missing.code == 1  # no database there, and no --create
    assert not target.exists()
    done = run_cli("--db", str(target), "import", str(out), "--create")
    assert done.code == 0, done.err
    assert done.out.startswith(f"imported session {sid}: 4 runs, ")
    back = run_cli("--db", str(target), "export", sid)
    assert back.out.encode() == out.read_bytes()
    same = run_cli("--db", str(target), "--json", "import", str(out)).json()
    assert (same["session_id"], same["imported"]) == (sid, False)


def test_import_tells_an_archive_from_a_session_file(tmp_path: Path) -> None:
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    sid = _store_with(source, "arch")
    archive = tmp_path / "arch.alarchive"
    assert run_cli("--db", str(source), "archive", sid, "--out", str(archive)).code == 0
    done = run_cli("--db", str(target), "import", str(archive), "--create")
    assert done.code == 0, done.err
    assert done.out.startswith(f"restored session {sid} from the archive {archive}: 4 runs")
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    refused = run_cli("--db", str(target), "import", str(other))
    assert refused.code == 1
    assert "a session file from `agentledger export` or an archive" in refused.err
    assert "Traceback" not in refused.err


def test_a_refused_import_with_create_leaves_no_database(tmp_path: Path) -> None:
    source, target = tmp_path / "source.db", tmp_path / "target.db"
    sid = _store_with(source, "cut")
    out = tmp_path / "cut.jsonl"
    assert run_cli("--db", str(source), "export", sid, "-o", str(out)).code == 0
    out.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:-1]))
    refused = run_cli("--db", str(target), "import", str(out), "--create")
    assert refused.code == 1
    assert "truncated" in refused.err
    assert not target.exists()


def test_an_encrypted_session_is_exported_only_with_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ring, vault = tmp_path / "ledger.db", tmp_path / "keyring.json", tmp_path / "keys.vault"
    assert run_cli("keys", "add", "k1", "--keyring", str(ring)).code == 0

    async def fill() -> str:
        encryption = Encryption(Keyring.from_file(ring), vault)
        async with await SQLiteStore.open(db, encryption=encryption) as store:
            sid, _ = await populate(store, World(store), "s")
            await store.end_session(sid, ended_at=World(store).now())
            return sid

    sid = asyncio.run(fill())
    out = tmp_path / "s.jsonl"
    refused = run_cli("--db", str(db), "export", sid, "-o", str(out))
    assert refused.code == 1
    assert "encrypted" in refused.err
    assert not out.exists()
    assert b"PAYLOAD-SECRET-alpha" not in db.read_bytes()  # sealed at rest
    monkeypatch.setenv("AGENTLEDGER_KEYRING_FILE", str(ring))
    monkeypatch.setenv("AGENTLEDGER_VAULT", str(vault))
    done = run_cli("--db", str(db), "export", sid, "-o", str(out))
    assert done.code == 0, done.err
    assert b"PAYLOAD-SECRET-alpha" in out.read_bytes()
    other = tmp_path / "other.db"  # a new encrypted database: imported records are sealed again
    imported = run_cli("--db", str(other), "import", str(out), "--create")
    assert imported.code == 0, imported.err
    assert b"PAYLOAD-SECRET-alpha" not in b"".join(
        p.read_bytes() for p in tmp_path.glob("other.db*")
    )
    back = run_cli("--db", str(other), "export", sid)
    assert back.out.encode() == out.read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["import", "f.jsonl", "--thread", "t"], "--session and --thread go with --from"),
        (["import", "x.db", "--from", "langgraph"], "--from langgraph needs --thread"),
        (["import", "x.db", "--from", "adk", "--thread", "t"], "--thread goes with"),
        (["export", "s", "--format", "csv"], "Invalid value for '--format'"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert done.code == 2
    assert message in done.err
