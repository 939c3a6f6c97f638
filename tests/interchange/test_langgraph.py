"""`import --from langgraph`: a thread LangGraph's own checkpointers wrote, brought in.

The thread is written by LangGraph itself (``langgraph_peer.py``): with this
interpreter when the test venv has LangGraph (the ``test`` group lists it), else
in a venv of its own, ``.venv-langgraph-peer``, built here with uv.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.interchange.peers import import_peer
from agentledger.interchange.peers.langgraph import langchain_to_messages
from agentledger.storage import payloads
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.session_image import read_session_image
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.transcript_chain import decode_reference
from agentledger.transcript import (
    JsonNumber,
    Message,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)
from tests.cli.conftest import run_cli
from tests.interchange.peer_venv import ROOT, peer_python
from tests.storage.postgres.server import create_database, drop_database

PEER_VENV = ROOT / ".venv-langgraph-peer"
SCRIPT = Path(__file__).with_name("langgraph_peer.py")
PACKAGES = ("langgraph>=0.6", "langgraph-checkpoint-sqlite>=2.0", "langgraph-checkpoint-postgres")


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


@pytest.fixture(scope="session")
def langgraph_python() -> Path:
    """An interpreter with LangGraph and its SQLite and PostgreSQL savers (never skipped)."""
    if all(_has(m) for m in ("langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres")):
        return Path(sys.executable)
    return peer_python(PEER_VENV, *PACKAGES, "psycopg[binary]")


def _thread(python: Path, kind: str, where: str) -> list[dict[str, Any]]:
    """Write thread t1 with LangGraph; what its ``get_state`` returns for the messages."""
    done = subprocess.run(
        [python, SCRIPT, kind, where], capture_output=True, text=True, check=True, timeout=300
    )
    returned: list[dict[str, Any]] = msgspec.json.decode(done.stdout.strip().splitlines()[-1])
    return returned


async def _check_import(store: SQLiteStore, source: str, returned: list[dict[str, Any]]) -> None:
    report = await import_peer(store, "langgraph", source, "t1")
    assert [(o.session_id, o.imported, o.runs) for o in report.sessions] == [
        ("langgraph:t1", True, 2)
    ]
    assert report.not_carried == []
    runs = await store.list_runs_by_session("langgraph:t1")
    replayed = await build_messages_from_run_log(store, runs[-1].run_id)
    expected, _ = langchain_to_messages(returned)
    assert replayed == expected  # replay equals the thread's state as LangGraph returns it
    assert [m.role for m in replayed] == ["system", "user", "assistant", "user", "assistant",
                                          "user", "assistant"]  # fmt: skip
    assert replayed[2].parts == (
        ToolUsePart(
            id="call-1", name="weather", input={"city": "Paris", "celsius": JsonNumber("21.5")}
        ),
    )
    assert replayed[3] == Message(
        role="user", parts=(ToolResultPart(tool_use_id="call-1", content='{"sky": "sunny"}'),)
    )
    assert replayed[6].parts == (TextPart(text="Rain."),)
    log = (await store.list_run_records(runs[1].run_id)).records
    (ref,) = [r for r in log if r.type == payloads.TRANSCRIPT_REFERENCED]
    assert decode_reference(ref).run_id == runs[0].run_id  # [V1] by reference
    before = await read_session_image(store, "langgraph:t1")
    again = await import_peer(store, "langgraph", source, "t1")
    assert [o.imported for o in again.sessions] == [False]
    assert await read_session_image(store, "langgraph:t1") == before


async def test_a_sqlite_saver_thread(langgraph_python: Path, tmp_path: Path) -> None:
    peer = tmp_path / "graph.db"
    returned = _thread(langgraph_python, "sqlite", str(peer))
    async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
        await _check_import(store, str(peer), returned)
        missing = await import_peer(store, "langgraph", str(peer), "nope")
        assert (missing.sessions, missing.not_carried) == ([], [f"thread 'nope': not in {peer}"])


async def test_a_postgres_saver_thread(
    langgraph_python: Path, postgres_dsn: str, tmp_path: Path
) -> None:
    dsn = create_database(postgres_dsn)  # its own database: LangGraph's tables, nothing else
    try:
        returned = _thread(langgraph_python, "postgres", dsn)
        async with await SQLiteStore.open(tmp_path / "ledger.db") as store:
            await _check_import(store, dsn, returned)
    finally:
        drop_database(dsn)


def test_the_command_imports_a_thread(langgraph_python: Path, tmp_path: Path) -> None:
    peer, db = tmp_path / "graph.db", tmp_path / "ledger.db"
    _thread(langgraph_python, "sqlite", str(peer))
    done = run_cli(
        "--db", str(db), "import", "--from", "langgraph", str(peer), "--thread", "t1", "--create"
    )
    assert done.code == 0, done.err
    assert done.out.startswith("imported session langgraph:t1: 2 runs, ")
    audit = run_cli("--db", str(db), "check")  # every record decodes, every transcript valid
    assert (audit.code, audit.err) == (0, ""), audit.out


def test_what_the_transcript_cannot_hold_is_reported() -> None:
    """Blocks and calls with no transcript part are listed, not dropped silently."""
    messages, gaps = langchain_to_messages(
        [
            {"type": "human", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            {
                "type": "ai",
                "content": "ok",
                "tool_calls": [],
                "invalid_tool_calls": [{"name": "f", "args": "{bad", "id": "c"}],
            },
            {"type": "chat", "content": "?"},
        ]
    )
    assert messages == [Message(role="assistant", parts=(TextPart(text="ok"),))]
    assert gaps == [
        "thread message 0 block 0 (image_url): the transcript has no part for it",
        "thread message 0 (human): empty, not carried",
        "thread message 1 invalid tool call 'f': its arguments were not JSON, "
        "so the transcript has no tool use for it",
        "thread message 2 (type 'chat'): the transcript has no message of that kind",
    ]
