"""The real ``agentledger`` command, run as a subprocess on a demo database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentledger.transcript import decode_messages, validate_planner_transcript

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, db: Path | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``python -m agentledger [--db DB] ARGS`` and capture its output."""
    prefix = ["--db", str(db)] if db is not None else []
    env = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"}
    return subprocess.run(
        [sys.executable, "-m", "agentledger", *prefix, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def cli_json(*args: str, db: Path) -> Any:
    """Run a command with ``--json`` and decode what it printed."""
    done = cli("--json", *args, db=db)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A database holding one demo session, and the demo's output."""
    db = tmp_path_factory.mktemp("cli") / "demo.db"
    done = cli("demo", db=db)
    assert done.returncode == 0, done.stderr
    return db, done.stdout


@pytest.fixture(scope="module")
def demo_runs(demo: tuple[Path, str]) -> tuple[str, list[dict[str, Any]]]:
    """The demo session's id and its runs, as ``--json runs`` prints them."""
    db, _ = demo
    (session,) = cli_json("sessions", db=db)
    return session["id"], cli_json("runs", session["id"], db=db)


def test_demo_shows_every_feature(demo: tuple[Path, str]) -> None:
    """`agentledger demo`: tools, a child run, a suspension resumed, a cancellation."""
    db, out = demo
    assert "offline demo model" in out
    assert "→ get_weather(city='Paris')" in out
    assert "→ get_weather(city='Tokyo')" in out
    assert "↳ child run of agent research" in out
    assert "run suspended, waiting for the user's confirmation" in out
    assert "→ book_table(" in out
    assert "confirmation AL-" in out
    assert "cancel requested: user pressed stop" in out
    assert "canceled (user pressed stop)" in out
    assert f"agentledger --db {db} runs demo-" in out


def test_runs_shows_the_tree_and_the_links(
    demo: tuple[Path, str], demo_runs: tuple[str, list[dict[str, Any]]]
) -> None:
    """[L2] [K2] runs lists every run, children under parents, continuations under predecessors."""
    db, _ = demo
    session, runs = demo_runs
    assert [(r["agent_id"], r["status"]) for r in runs] == [
        ("concierge", "completed"),
        ("concierge", "completed"),
        ("research", "completed"),
        ("concierge", "suspended"),
        ("concierge", "completed"),
        ("concierge", "canceled"),
    ]
    assert runs[2]["parent_run_id"] == runs[1]["run_id"]
    assert runs[4]["predecessor_run_id"] == runs[3]["run_id"]
    assert runs[3]["successor_run_id"] == runs[4]["run_id"]
    assert runs[5]["cancellation_reason"] == "user pressed stop"
    table = cli("runs", session, db=db)
    assert table.returncode == 0
    assert f"child: {runs[2]['run_id']}" in table.stdout
    assert f"continued by: {runs[4]['run_id']}" in table.stdout


def test_records_and_transcript(
    demo: tuple[Path, str], demo_runs: tuple[str, list[dict[str, Any]]]
) -> None:
    """[R2] records come in order; the transcript is rebuilt from them and is valid."""
    db, _ = demo
    _, runs = demo_runs
    last = runs[-1]["run_id"]
    records = cli_json("records", last, db=db)
    assert records[0]["type"] == "run_started"
    assert records[-1]["type"] == "run_completed"
    assert [r["id"] for r in records] == [str(i) for i in range(1, len(records) + 1)]
    assert records[-1]["payload"]["cancellation"] == {"reason": "user pressed stop"}
    done = cli("--json", "transcript", last, db=db)
    messages = decode_messages(done.stdout.strip().encode())
    validate_planner_transcript(messages)
    assert len(messages) == 15  # three turns of four, and the canceled one with its result
    table = cli("records", last, db=db)
    assert "runtime.cancellation_intent" in table.stdout
    shown = cli("transcript", last, db=db)
    assert "[call_" in shown.stdout  # tool ids are shown verbatim, not eaten as markup


def test_demo_twice_then_end_and_purge(tmp_path: Path) -> None:
    """The demo runs twice into ./agentledger.db (two sessions); then [D2] [D3] end and purge
    one: it is gone, and purging an active session is refused with a one-line error."""
    assert cli("demo", cwd=tmp_path).returncode == 0
    assert cli("demo", cwd=tmp_path).returncode == 0
    db = tmp_path / "agentledger.db"
    first, second = (s["id"] for s in cli_json("sessions", db=db))
    assert first != second
    refused = cli("session", "purge", first, db=db)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
    assert "still active" in refused.stderr
    assert "Traceback" not in refused.stderr
    ended = cli("session", "end", first, db=db)
    assert ended.returncode == 0
    assert "ended" in ended.stdout
    assert cli("session", "purge", first, db=db).returncode == 0
    assert [s["id"] for s in cli_json("sessions", db=db)] == [second]
    gone = cli("runs", first, db=db)
    assert gone.returncode == 1
    assert "purged" in gone.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["records", "no-such-run"], 1, "run 'no-such-run' not found"),
        (["runs", "no-such-session"], 1, "session 'no-such-session' not found"),
        (["records"], 2, "the following arguments are required: run_id"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)
def test_errors_are_one_line_with_the_right_exit_code(
    demo: tuple[Path, str], args: list[str], code: int, message: str
) -> None:
    """Exit 1 for agentledger errors (one line, no traceback), 2 for usage errors."""
    db, _ = demo
    done = cli(*args, db=db)
    assert done.returncode == code
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    if code == 1:
        assert done.stderr.count("\n") == 1


def test_a_missing_database_is_an_error(tmp_path: Path) -> None:
    """Inspecting a database that does not exist says so instead of creating one."""
    done = cli("sessions", db=tmp_path / "nope.db")
    assert done.returncode == 1
    assert "no database at" in done.stderr
    assert not (tmp_path / "nope.db").exists()
