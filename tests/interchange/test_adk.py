"""`import --from adk`: a store Google ADK's own DatabaseSessionService wrote, brought in.

ADK's pins clash with the test group's (OpenTelemetry among them), so, as
bench/session_peers.py does, it lives in a venv of its own, ``.venv-adk-peer``,
built here with uv from the ``bench-adk-peer`` group when it is absent; a script
run there writes the store and prints what ``get_session`` returns.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.interchange.peers import import_peer
from agentledger.interchange.peers.adk import adk_events_to_messages
from agentledger.storage import payloads
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.session_image import read_session_image
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.transcript_chain import decode_reference
from agentledger.transcript import JsonNumber, TextPart, ThinkingPart, ToolResultPart, ToolUsePart
from tests.cli.conftest import run_cli
from tests.interchange.peer_venv import ROOT, peer_python
from tests.storage.postgres.server import create_database, drop_database

PEER_VENV = ROOT / ".venv-adk-peer"
SCRIPT = Path(__file__).with_name("adk_peer.py")


@pytest.fixture(scope="session")
def adk_python() -> Path:
    """The ADK peer's interpreter, its venv built first if absent (never skipped)."""
    return peer_python(PEER_VENV, "--group", "bench-adk-peer", "asyncpg", "-e", ROOT)


def _adk_store(python: Path, db: Path | str) -> dict[str, list[dict[str, Any]]]:
    """Write the store with ADK itself; what its ``get_session`` returns, numbers exact."""
    done = subprocess.run(
        [python, SCRIPT, db], capture_output=True, text=True, check=True, timeout=300
    )
    decoder = msgspec.json.Decoder(float_hook=JsonNumber)
    returned: dict[str, list[dict[str, Any]]] = decoder.decode(done.stdout.strip().splitlines()[-1])
    return returned


async def test_each_adk_session_becomes_turns_by_reference(
    adk_python: Path, tmp_path: Path
) -> None:
    peer = tmp_path / "adk.db"
    returned = _adk_store(adk_python, peer)
    async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
        report = await import_peer(store, "adk", f"sqlite+aiosqlite:///{peer}")
        sids = [o.session_id for o in report.sessions]
        assert sids == ["adk:weather-app:u1:chat-1", "adk:weather-app:u1:chat-2"]
        assert report.not_carried == [
            "session weather-app/u1/chat-1: 1 event(s) without content "
            "(state changes, transfers) not carried"
        ]
        for peer_id, sid in zip(("chat-1", "chat-2"), sids, strict=True):
            runs = await store.list_runs_by_session(sid)
            replayed = await build_messages_from_run_log(store, runs[-1].run_id)
            expected, _, _ = adk_events_to_messages(returned[peer_id])
            assert replayed == expected  # replay equals what ADK returns for the session
        chat = await build_messages_from_run_log(
            store, (await store.list_runs_by_session(sids[0]))[-1].run_id
        )
        assert [m.role for m in chat] == ["user", "assistant", "user", "assistant", "user",
                                          "assistant"]  # fmt: skip
        assert chat[1].parts == (
            ToolUsePart(
                id="call-1",
                name="weather",
                input={"city": "Paris", "celsius": JsonNumber("21.5")},
            ),
        )
        assert isinstance(chat[2].parts[0], ToolResultPart)
        assert chat[4].parts == (TextPart(text="And tomorrow, caf\u00e9?"),)
        assert chat[5].parts == (
            ThinkingPart(text="Looking at the models."),
            TextPart(text="Rain."),
        )
        runs = await store.list_runs_by_session(sids[0])
        assert len(runs) == 2
        log = (await store.list_run_records(runs[1].run_id)).records
        (ref,) = [r for r in log if r.type == payloads.TRANSCRIPT_REFERENCED]
        assert decode_reference(ref).run_id == runs[0].run_id
        session = await store.load_session(sids[0])
        assert session.labels["adk_app"] == "weather-app"

        before = [await read_session_image(store, sid) for sid in sids]
        again = await import_peer(store, "adk", str(peer), "chat-1")
        assert [(o.session_id, o.imported) for o in again.sessions] == [(sids[0], False)]
        assert [await read_session_image(store, sid) for sid in sids] == before


def test_the_command_imports_an_adk_store(adk_python: Path, tmp_path: Path) -> None:
    peer, db = tmp_path / "adk.db", tmp_path / "ledger.db"
    _adk_store(adk_python, peer)
    done = run_cli("--db", str(db), "--json", "import", "--from", "adk", str(peer), "--create")
    report = done.json()
    assert [s["imported"] for s in report["sessions"]] == [True, True]
    assert report["peer"] == "adk"
    audit = run_cli("--db", str(db), "check")  # every record decodes, every transcript valid
    assert (audit.code, audit.err) == (0, ""), audit.out
    text = run_cli("--db", str(db), "import", "--from", "adk", f"sqlite:///{peer}")
    assert text.code == 0, text.err
    assert text.out.splitlines()[0].startswith(
        "already held, unchanged: session adk:weather-app:u1:chat-1: 2 runs, "
    )
    assert json.loads(run_cli("--db", str(db), "--json", "sessions").out)["sessions"]


async def test_an_adk_store_on_postgresql(
    adk_python: Path, postgres_dsn: str, tmp_path: Path
) -> None:
    """DatabaseSessionService on PostgreSQL (events as JSONB) reads the same, numbers exact."""
    from psycopg import conninfo

    dsn = create_database(postgres_dsn)  # its own database: ADK's tables, nothing else
    try:
        parts = conninfo.conninfo_to_dict(dsn)
        url = (
            f"postgresql+asyncpg://{parts.get('user', 'postgres')}"
            f"{':' + str(parts['password']) if parts.get('password') else ''}"
            f"@{parts.get('host', '127.0.0.1')}:{parts.get('port', 5432)}/{parts['dbname']}"
        )
        returned = _adk_store(adk_python, url)
        async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
            report = await import_peer(store, "adk", dsn, "chat-1")
            (outcome,) = report.sessions
            runs = await store.list_runs_by_session(outcome.session_id)
            replayed = await build_messages_from_run_log(store, runs[-1].run_id)
            expected, _, _ = adk_events_to_messages(returned["chat-1"])
            assert replayed == expected
            assert replayed[1].parts[0] == ToolUsePart(
                id="call-1", name="weather", input={"city": "Paris", "celsius": JsonNumber("21.5")}
            )
            again = await import_peer(store, "adk", url, "chat-1")  # its URL reads the same
            assert [o.imported for o in again.sessions] == [False]
    finally:
        drop_database(dsn)
