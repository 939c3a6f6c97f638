"""`import --from openai-agents`: a store the SDK's own SQLiteSession wrote, brought in."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession

from agentledger.contrib.openai_agents import items_to_messages
from agentledger.interchange.peers import import_peer
from agentledger.storage import payloads
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.session_image import read_session_image
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.transcript_chain import decode_reference
from tests.cli.conftest import run_cli
from tests.interchange.peer_venv import ROOT, peer_python
from tests.storage.postgres.server import create_database, drop_database

PEER_VENV = ROOT / ".venv-agents-peer"
SCRIPT = Path(__file__).with_name("agents_peer.py")

CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Paris", "celsius": 21.5}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21.5 C"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Sunny, 21.5 C.", "annotations": []}],
    },
    {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow, caf\u00e9?"}]},
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "paris weather tomorrow"},
    },
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_2",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Rain.", "annotations": []}],
    },
    {"role": "user", "content": "Thanks"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_3",
        "status": "completed",
        "content": [{"type": "output_text", "text": "You're welcome.", "annotations": []}],
    },
]


async def _peer_store(path: Path) -> dict[str, list[Any]]:
    """Two conversations written by the SDK itself; what ``get_items()`` returns for each."""
    chat, short = SQLiteSession("chat-1", path), SQLiteSession("chat-2", path)
    try:
        await chat.add_items(CHAT[:6])  # the SDK's own writes, in two calls
        await chat.add_items(CHAT[6:])
        await short.add_items([{"role": "user", "content": "hi"}])
        return {"chat-1": await chat.get_items(), "chat-2": await short.get_items()}
    finally:
        chat.close()
        short.close()


async def test_each_conversation_becomes_turns_by_reference(tmp_path: Path) -> None:
    peer = tmp_path / "agents.db"
    held = await _peer_store(peer)
    async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
        report = await import_peer(store, "openai-agents", str(peer))
        assert [o.session_id for o in report.sessions] == [
            "openai-agents:chat-1",
            "openai-agents:chat-2",
        ]
        assert all(o.imported for o in report.sessions)
        assert len(report.not_carried) == 1
        assert "session 'chat-1' item 6 (web_search_call)" in report.not_carried[0]
        for peer_id, items in held.items():
            sid = f"openai-agents:{peer_id}"
            runs = await store.list_runs_by_session(sid)
            carried = [i for i in items if i.get("type") != "web_search_call"]
            # replay of the last turn equals what the SDK returns for the session
            replayed = await build_messages_from_run_log(store, runs[-1].run_id)
            assert replayed == items_to_messages(carried)
            session = await store.load_session(sid)
            assert session.labels == {"imported_from": "openai-agents", "peer_session": peer_id}
        runs = await store.list_runs_by_session("openai-agents:chat-1")
        assert len(runs) == 3  # one run per user turn
        for before, run in itertools.pairwise(runs):
            log = (await store.list_run_records(run.run_id)).records
            (ref,) = [r for r in log if r.type == payloads.TRANSCRIPT_REFERENCED]
            assert decode_reference(ref).run_id == before.run_id  # [V1] not a copy
        first = await build_messages_from_run_log(store, runs[0].run_id)
        assert [m.role for m in first] == ["system", "user", "assistant", "user", "assistant"]

        sids = [o.session_id for o in report.sessions]
        before = [await read_session_image(store, sid) for sid in sids]
        again = await import_peer(store, "openai-agents", str(peer))
        assert [o.imported for o in again.sessions] == [False, False]
        assert [o.digest for o in again.sessions] == [o.digest for o in report.sessions]
        # importing twice changes nothing
        assert [await read_session_image(store, sid) for sid in sids] == before
        assert len((await store.list_sessions()).sessions) == 2

        grown = SQLiteSession("chat-2", peer)  # the conversation goes on in the SDK
        try:
            await grown.add_items([{"role": "user", "content": "still there?"}])
        finally:
            grown.close()
        third = await import_peer(store, "openai-agents", str(peer))
        assert [o.imported for o in third.sessions] == [False]  # chat-1, unchanged
        assert third.not_carried[-1].startswith(
            "session openai-agents:chat-2: not imported: SessionConflictError"
        )
        assert "purge the session first" in third.not_carried[-1]
        assert [await read_session_image(store, sid) for sid in sids] == before


def test_the_command_imports_one_session_and_reports(tmp_path: Path) -> None:
    peer, db = tmp_path / "agents.db", tmp_path / "ledger.db"
    asyncio.run(_peer_store(peer))
    done = run_cli(
        "--db", str(db), "import", "--from", "openai-agents", str(peer),
        "--session", "chat-1", "--create",
    )  # fmt: skip
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].startswith("imported session openai-agents:chat-1: 3 runs, ")
    assert lines[1].startswith("not carried: session 'chat-1' item 6 (web_search_call)")
    audit = run_cli("--db", str(db), "check")  # every record decodes, every transcript valid
    assert (audit.code, audit.err) == (0, ""), audit.out
    again = run_cli(
        "--db", str(db), "--json", "import", "--from", "openai-agents", str(peer),
        "--session", "chat-1",
    ).json()  # fmt: skip
    assert [s["imported"] for s in again["sessions"]] == [False]
    absent = run_cli("--db", str(db), "import", "--from", "openai-agents", str(tmp_path / "x"))
    assert absent.code == 1
    assert "an existing SQLite file" in absent.err
    other = run_cli("--db", str(db), "import", "--from", "openai-agents", str(db))
    assert other.code == 1
    assert "agent_messages" in other.err


@pytest.fixture(scope="session")
def sqlalchemy_python() -> Path:
    """An interpreter with the SDK, SQLAlchemy and asyncpg: this one when the test venv has
    them (the ``test`` group lists them), else a venv of its own (never skipped)."""
    if all(_has(m) for m in ("sqlalchemy", "asyncpg")):
        return Path(sys.executable)
    return peer_python(PEER_VENV, "openai-agents[sqlalchemy]>=0.24")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _sqlalchemy_session(python: Path, url: str) -> list[dict[str, Any]]:
    """Write session chat-1 with the SDK's SQLAlchemySession; what ``get_items()`` returns."""
    done = subprocess.run(
        [python, SCRIPT, url], capture_output=True, text=True, check=True, timeout=300
    )
    items: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return items


async def test_a_sqlalchemy_session_on_postgresql(
    sqlalchemy_python: Path, postgres_dsn: str, tmp_path: Path
) -> None:
    """The SDK's SQLAlchemySession on PostgreSQL, read through its DSN: replay equals
    what ``get_items()`` returns."""
    from psycopg import conninfo

    dsn = create_database(postgres_dsn)  # its own database: the SDK's tables, nothing else
    try:
        parts = conninfo.conninfo_to_dict(dsn)
        url = (
            f"postgresql+asyncpg://{parts.get('user', 'postgres')}"
            f"{':' + str(parts['password']) if parts.get('password') else ''}"
            f"@{parts.get('host', '127.0.0.1')}:{parts.get('port', 5432)}/{parts['dbname']}"
        )
        items = _sqlalchemy_session(sqlalchemy_python, url)
        async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
            report = await import_peer(store, "openai-agents", url)
            assert [(o.session_id, o.runs) for o in report.sessions] == [
                ("openai-agents:chat-1", 2)
            ]
            assert report.not_carried == []
            runs = await store.list_runs_by_session("openai-agents:chat-1")
            replayed = await build_messages_from_run_log(store, runs[-1].run_id)
            assert replayed == items_to_messages(items)
            again = await import_peer(store, "openai-agents", dsn, "chat-1")
            assert [o.imported for o in again.sessions] == [False]
    finally:
        drop_database(dsn)
