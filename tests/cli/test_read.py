"""The read commands on a SQLite demo database: text views and the one JSON style."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentledger.cli import main
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import decode_messages, validate_planner_transcript
from tests.cli.conftest import Demo, run_cli

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TIME_FIELDS = {"created_at", "ended_at", "started_at", "updated_at", "timestamp"}


def _times(value: Any) -> list[str]:
    """Every value of a time field anywhere in ``value``."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k in TIME_FIELDS and v is not None]
        return found + [t for v in value.values() for t in _times(v)]
    if isinstance(value, list):
        return [t for v in value for t in _times(v)]
    return []


def test_demo_json_describes_what_it_recorded(demo: Demo) -> None:
    """`demo --json` prints JSON (it used to ignore --json): the session and its runs."""
    assert [(r["agent_id"], r["status"]) for r in demo.runs] == [
        ("concierge", "completed"),
        ("concierge", "completed"),
        ("research", "completed"),
        ("concierge", "suspended"),
        ("concierge", "completed"),
        ("concierge", "canceled"),
    ]


def test_json_style_is_one_everywhere(demo: Demo) -> None:
    """Every time has milliseconds and Z; absent ids are "" and absent times null."""
    outputs = [
        run_cli("--db", str(demo.db), "--json", "sessions").json(),
        run_cli("--db", str(demo.db), "--json", "runs", demo.session).json(),
        run_cli("--db", str(demo.db), "--json", "records", demo.runs[-1]["run_id"]).json(),
    ]
    times = [t for output in outputs for t in _times(output)]
    assert len(times) > 20
    assert all(TIME.match(t) for t in times), [t for t in times if not TIME.match(t)]
    (session,) = outputs[0]["sessions"]
    assert session["ended_at"] is None
    first = outputs[1]["runs"][0]
    assert first["parent_run_id"] == ""
    assert first["predecessor_run_id"] == ""
    assert outputs[2]["next_cursor"] == ""


def test_sessions(demo: Demo) -> None:
    done = run_cli("--db", str(demo.db), "sessions")
    assert done.code == 0
    header, row = done.out.splitlines()
    assert header.split() == ["SESSION", "STATUS", "CREATED", "ENDED", "LABELS", "RUNS"]
    assert row.split() == [demo.session, "active", row.split()[2], "-", "-", "6"]


async def _labelled_sessions(db: Path) -> None:
    store = await SQLiteStore.open(str(db))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(5):
        team = "red" if i % 2 == 0 else "blue"
        await store.create_session(f"s{i}", t0 + timedelta(seconds=i), labels={"team": team})
    await store.close()


def test_sessions_filter_by_label_and_page(tmp_path: Path) -> None:
    """[D6] newest first, ``--label`` filters, ``--limit`` pages and ``--cursor`` resumes."""
    db = tmp_path / "labels.db"
    asyncio.run(_labelled_sessions(db))
    red = run_cli("--db", str(db), "--json", "sessions", "--label", "team=red").json()
    assert [s["id"] for s in red["sessions"]] == ["s4", "s2", "s0"]
    assert red["sessions"][0]["labels"] == {"team": "red"}
    first = run_cli("--db", str(db), "--json", "sessions", "--limit", "2").json()
    assert [s["id"] for s in first["sessions"]] == ["s4", "s3"]
    rest = run_cli("--db", str(db), "--json", "sessions", "--cursor", first["next_cursor"]).json()
    assert [s["id"] for s in rest["sessions"]] == ["s2", "s1", "s0"]
    assert rest["next_cursor"] == ""
    text = run_cli("--db", str(db), "sessions", "--label", "team=blue", "--limit", "1")
    assert text.code == 0
    lines = text.out.splitlines()
    assert lines[1].split()[0] == "s3"
    assert "team=blue" in lines[1]
    assert lines[2].startswith("more: --cursor ")
    bad = run_cli("--db", str(db), "sessions", "--label", "team")
    assert bad.code == 2
    assert "KEY=VALUE" in bad.err


def test_runs_tree_shows_whole_ids_once(demo: Demo) -> None:
    """[L2] [K2] one tree (no table repeating it): children under parents, continuations
    under predecessors; every id whole on its line, however narrow the terminal."""
    runs = demo.runs
    done = run_cli("--db", str(demo.db), "runs", demo.session)
    assert done.code == 0
    lines = done.out.splitlines()
    assert lines[0].startswith(f"session {demo.session}  active")
    assert len(lines) == 1 + len(runs)
    for r in runs:
        assert sum(r["run_id"] in line for line in lines) >= 1
    assert f"│   └── child: {runs[2]['run_id']}  research  completed" in done.out
    assert f"│   └── continued by: {runs[4]['run_id']}  concierge  completed" in done.out
    assert f"└── {runs[5]['run_id']}  concierge  canceled  (user pressed stop)" in done.out
    data = run_cli("--db", str(demo.db), "runs", demo.session, "--json").json()
    assert data["runs"][2]["parent_run_id"] == runs[1]["run_id"]
    assert data["runs"][4]["predecessor_run_id"] == runs[3]["run_id"]
    assert data["runs"][3]["successor_run_id"] == runs[4]["run_id"]
    # the chain of turns: each turn says which turn it follows by reference
    for turn, before in ((1, 0), (3, 1), (5, 4)):
        line = next(x for x in lines if f"── {runs[turn]['run_id']}  concierge" in x)
        assert line.endswith(f"  follows {runs[before]['run_id']}"), line
        assert data["runs"][turn]["history"] == {
            "kind": "next_turn",
            "run_id": runs[before]["run_id"],
            "through": runs[before]["last_record_id"],
        }
    assert data["runs"][0]["history"] is None


def test_records_json_and_text(demo: Demo) -> None:
    """[R2] records come in commit order; tool ids are shown verbatim."""
    last = demo.runs[-1]["run_id"]
    data = run_cli("--db", str(demo.db), "--json", "records", last).json()
    records = data["records"]
    assert data["run_id"] == last
    assert records[0]["type"] == "run_started"
    assert records[-1]["type"] == "run_completed"
    assert [r["id"] for r in records] == [str(i) for i in range(1, len(records) + 1)]
    assert records[-1]["payload"]["cancellation"] == {"reason": "user pressed stop"}
    text = run_cli("--db", str(demo.db), "records", last)
    assert text.code == 0
    lines = text.out.splitlines()
    assert lines[0].split() == ["ID", "TYPE", "EVENT", "KEY", "TIME", "PAYLOAD"]
    assert len(lines) == 1 + len(records)
    assert "runtime.cancellation_intent" in text.out


def test_options_work_before_or_after_the_command(demo: Demo) -> None:
    last = demo.runs[-1]["run_id"]
    before = run_cli("--db", str(demo.db), "--json", "records", last)
    after = run_cli("records", last, "--json", "--store", str(demo.db))
    assert before.code == after.code == 0
    assert before.out == after.out


def test_transcript(demo: Demo) -> None:
    last = demo.runs[-1]["run_id"]
    done = run_cli("--db", str(demo.db), "--json", "transcript", last)
    assert done.code == 0
    messages = decode_messages(done.out.strip().encode())
    validate_planner_transcript(messages)
    assert len(messages) == 15  # three turns of four, and the canceled one with its result
    shown = run_cli("--db", str(demo.db), "transcript", last)
    runs = [run["run_id"] for run in demo.runs]
    # the chain of turns first (the canceled last turn follows the resumed third, ...)
    assert shown.out.splitlines()[:4] == [
        f"{runs[5]} follows {runs[4]}",
        f"{runs[4]} continues {runs[3]}",
        f"{runs[3]} follows {runs[1]}",
        f"{runs[1]} follows {runs[0]}",
    ]
    assert shown.out.splitlines()[4] == f"#0 user  ({runs[0]} record 3, by reference)"
    assert "    → get_weather(" in shown.out
    assert "[call_1]" in shown.out  # tool ids verbatim, not eaten as markup
    assert "#14 user" in shown.out
    # Piped output is not forced to 160 columns: a long message stays one whole line.
    answer = next(line for line in shown.out.splitlines() if "From the research agent" in line)
    assert len(answer) > 160
    assert answer.endswith("until 1930.")


def test_unknown_ids_are_one_line_errors(demo: Demo) -> None:
    for args, message in [
        (["records", "no-such-run"], "run 'no-such-run' not found"),
        (["transcript", "no-such-run"], "run 'no-such-run' not found"),
        (["tail", "no-such-run"], "run 'no-such-run' not found"),
        (["runs", "no-such-session"], "session 'no-such-session' not found"),
    ]:
        done = run_cli("--db", str(demo.db), *args)
        assert done.code == 1
        assert done.err == f"agentledger: error: {message}\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_narrow_terminal_cuts_previews_never_ids(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids used to fold mid-id at 100 columns: now a row is one line, ids whole; only the
    payload preview shrinks to the terminal's width."""
    monkeypatch.setattr(
        shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size((60, 20))
    )
    for args in (["runs", demo.session], ["records", demo.runs[2]["run_id"]]):
        out = _Terminal()
        with contextlib.redirect_stdout(out):
            assert main(["--db", str(demo.db), *args]) == 0
        lines = out.getvalue().splitlines()
        for run in demo.runs:
            if run["run_id"] in out.getvalue():
                assert any(run["run_id"] in line for line in lines)
        assert re.search(r"run-[0-9a-f]{1,31}$", out.getvalue(), re.M) is None  # no cut id
    records = [line for line in lines[1:] if line.split()[1] != "run_started"]
    previews = [line.split("  ")[-1] for line in records]
    assert max(len(p) for p in previews) == 20  # the least a preview gets
    assert any(p.endswith("…") for p in previews)
