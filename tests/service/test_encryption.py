"""[A2] `agentledger serve` on an encrypted store: clients read plaintext, an erasure holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentledger.errors import SessionKeyErasedError
from agentledger.service import StoreClient
from agentledger.storage.conformance import World
from tests.cli.conftest import run_cli
from tests.service.process import ServiceProcess, Tokens
from tests.storage.encryption.test_sqlite import SECRETS, Files, populate


async def test_a_served_encrypted_store_and_an_erasure_beside_it(
    tmp_path: Path, tokens: Tokens
) -> None:
    """Sealed at rest, plaintext to clients; `keys erase` in a shell reaches the running serve."""
    files = Files(tmp_path)
    ring = tmp_path / "keyring.json"
    ring.write_text(files.keyring.to_json())
    store = await files.open()
    sid, run_id = await populate(store, World(store), "s")
    await store.close()
    env = {"AGENTLEDGER_KEYRING_FILE": str(ring), "AGENTLEDGER_VAULT": str(files.vault)}
    with ServiceProcess(str(files.db), tokens.path, env=env) as service:
        async with StoreClient(service.url, token=tokens.reader) as client:
            page = await client.list_run_records(run_id)
            assert SECRETS[0] in page.records[1].payload
            erased = await asyncio.to_thread(
                run_cli, "--db", str(files.db), "keys", "erase", sid,
                "--keyring", str(ring), "--vault", str(files.vault),
            )  # fmt: skip
            assert erased.code == 0, erased.err
            with pytest.raises(SessionKeyErasedError) as caught:
                await client.list_run_records(run_id)
            assert caught.value.session_id == sid
