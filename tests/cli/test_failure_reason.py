"""Why a run failed is shown wherever its status is: ``agentledger runs`` (text and
--json), ``tail``'s last line, and the web inspector's session page, session
conversation, run header and transcript (server-rendered pages, read over HTTP)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from markupsafe import escape

from agentledger.runtime import user_message
from agentledger.storage import RunStatus
from agentledger.storage.sqlite import SQLiteStore
from agentledger.testing import ScriptedModel, reply
from tests.cli.conftest import run_cli
from tests.runtime.support import chat_runtime
from tests.service.process import ServiceProcess, Tokens


@dataclass(frozen=True)
class Failed:
    db: Path
    session: str
    ok_run: str
    failed_run: str
    reason: str
    """``Kind: message``, as the failed run's terminal record holds them."""


async def _make(db: Path) -> Failed:
    store = await SQLiteStore.open(str(db))
    try:
        await store.create_session("s-fail")
        # One answer scripted: the first turn answers, the second finds the script empty.
        runtime = chat_runtime(store, ScriptedModel([reply("first answer")]))
        chat = runtime.agent_client("chat")
        ok = await chat.run("s-fail", [user_message("hello")])
        failed = await chat.run("s-fail", [user_message("and again")])
        await runtime.close()
    finally:
        await store.close()
    assert ok.status is RunStatus.COMPLETED
    assert failed.status is RunStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.kind == "planner_error"
    assert failed.failure.message.startswith("ScriptExhaustedError: ")
    reason = f"{failed.failure.kind}: {failed.failure.message}"
    return Failed(db, "s-fail", ok.run_id, failed.run_id, reason)


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Failed:
    return asyncio.run(_make(tmp_path_factory.mktemp("failed") / "ledger.db"))


def test_runs_shows_why_a_run_failed(failed: Failed) -> None:
    done = run_cli("--db", str(failed.db), "runs", failed.session)
    assert done.code == 0, done.err
    (line,) = [x for x in done.out.splitlines() if failed.failed_run in x]
    assert f"  failed  ({failed.reason})  started " in line, line
    (ok,) = [x for x in done.out.splitlines() if failed.ok_run in x]
    assert "completed  started " in ok, ok


def test_runs_json_carries_the_failure(failed: Failed) -> None:
    rows = {r["run_id"]: r for r in run_cli("--db", str(failed.db), "--json", "runs",
                                             failed.session).json()["runs"]}  # fmt: skip
    kind, _, message = failed.reason.partition(": ")
    assert rows[failed.failed_run]["failure"] == {"kind": kind, "message": message}
    assert rows[failed.ok_run]["failure"] is None


def test_tail_ends_with_why_the_run_failed(failed: Failed) -> None:
    done = run_cli("--db", str(failed.db), "tail", failed.failed_run)
    assert done.code == 0, done.err
    assert done.err == f"run {failed.failed_run} failed: {failed.reason}\n"


def test_the_inspector_shows_why_a_run_failed(failed: Failed, tmp_path: Path) -> None:
    tokens = Tokens(tmp_path / "tokens.json")
    shown = str(escape(failed.reason))  # as Jinja escapes it
    with ServiceProcess(str(failed.db), tokens.path) as service:
        headers = {"Authorization": f"Bearer {tokens.reader}"}
        with httpx.Client(base_url=service.url, headers=headers, timeout=60) as client:

            def page(path: str, **params: str) -> str:
                answer = client.get(path, params=params)
                assert answer.status_code == 200, answer.text[:500]
                return answer.text

            session = page("/ui/session", id=failed.session)
            assert f'<span class="reason failure">{shown}</span>' in session
            assert session.count(shown) == 1  # the failed run's, not the completed one's
            conversation = page("/ui/session/conversation", id=failed.session)
            assert f'<span class="reason failure">{shown}</span>' in conversation
            header = page("/ui/run", id=failed.failed_run)
            assert f'<dd id="run-failure">{shown}</dd>' in header
            transcript = page("/ui/run/transcript", id=failed.failed_run)
            assert f'<dd id="run-failure">{shown}</dd>' in transcript
            assert f"The run failed here: {shown}</p>" in transcript
            assert shown not in page("/ui/run", id=failed.ok_run)


def test_the_reason_is_the_terminal_records(failed: Failed) -> None:
    """What is shown is the run_completed payload's failure, as stored."""
    done = run_cli("--db", str(failed.db), "--json", "records", failed.failed_run, "--full")
    last = done.json()["records"][-1]
    assert last["type"] == "run_completed"
    payload = last["payload"] if isinstance(last["payload"], dict) else json.loads(last["payload"])
    assert f"{payload['failure']['kind']}: {payload['failure']['message']}" == failed.reason
