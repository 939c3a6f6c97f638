"""``agentledger keys``: a keyring file, rotation, erasure; read commands on an encrypted file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentledger.storage.conformance import World
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import run_cli
from tests.storage.encryption.test_sqlite import populate


def test_keys_rotate_and_erase_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add -> data under k1; add k2, rotate, retire k1; records read; erase; records refused."""
    db, ring, vault = tmp_path / "ledger.db", tmp_path / "keyring.json", tmp_path / "keys.vault"
    assert run_cli("keys", "add", "k1", "--keyring", str(ring)).code == 0
    assert ring.stat().st_mode & 0o077 == 0

    async def fill() -> tuple[str, str]:
        encryption = Encryption(Keyring.from_file(ring), vault)
        store = await SQLiteStore.open(db, encryption=encryption)
        try:
            return await populate(store, World(store), "s")
        finally:
            await store.close()

    sid, run_id = asyncio.run(fill())
    plain = run_cli("--db", str(db), "records", run_id)
    assert plain.code == 1
    assert "encrypted" in plain.err  # no keyring: a clear refusal, naming where keys go
    assert "$AGENTLEDGER_KEYRING_FILE" in plain.err
    assert "$AGENTLEDGER_VAULT" in plain.err

    assert run_cli("keys", "add", "k2", "--keyring", str(ring)).code == 0
    keys = ["--keyring", str(ring), "--vault", str(vault)]
    done = run_cli("--db", str(db), "--json", "keys", "rotate", *keys)
    assert (done.code, json.loads(done.out)) == (0, {"rewrapped": 1}), done.err
    assert run_cli("keys", "retire", "k1", "--keyring", str(ring)).code == 0
    assert json.loads(ring.read_text())["current"] == "k2"

    monkeypatch.setenv("AGENTLEDGER_KEYRING_FILE", str(ring))
    monkeypatch.setenv("AGENTLEDGER_VAULT", str(vault))
    shown = run_cli("--db", str(db), "records", run_id, "--full")
    assert shown.code == 0, shown.err
    assert "PAYLOAD-SECRET-alpha" in shown.out
    audit = run_cli("--db", str(db), "check")
    assert (audit.code, audit.err) == (0, "")
    assert "4 record(s): no findings" in audit.out  # sealed lifecycle payloads decode
    assert run_cli("--db", str(db), "keys", "erase", sid).code == 0
    assert run_cli("--db", str(db), "check").code == 0  # an erased session is no finding
    again = run_cli("--db", str(db), "keys", "erase", sid)
    assert "already erased" in again.out
    gone = run_cli("--db", str(db), "records", run_id)
    assert gone.code == 1
    assert "erased" in gone.err
    assert sid in gone.err
