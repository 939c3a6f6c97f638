"""`agentledger usage`: a session's counters and each run's, the totals over sessions and per
label, read from the demo's real database."""

from __future__ import annotations

from pathlib import Path

from agentledger.storage.sqlite import check_invariants
from tests.cli.conftest import Demo, run_cli

_COUNTERS = ("bytes", "records", "runs", "input_tokens", "output_tokens", "cached_tokens")


def test_a_session_and_each_of_its_runs(demo: Demo) -> None:
    shown = run_cli("--db", str(demo.db), "--json", "usage", demo.session).json()
    assert shown["session_id"] == demo.session
    by_run = shown["by_run"]
    assert [r["run_id"] for r in by_run] == [r["run_id"] for r in demo.runs]
    for name in _COUNTERS:
        assert shown[name] == sum(r[name] for r in by_run), name
    assert shown["runs"] == len(demo.runs)
    assert shown["input_tokens"] > 0  # the demo model reports its tokens
    assert shown["output_tokens"] > 0
    listed = 0
    for r in demo.runs:
        records = run_cli("--db", str(demo.db), "--json", "records", r["run_id"]).json()
        listed += len(records["records"])
    assert shown["records"] == listed
    text = run_cli("--db", str(demo.db), "usage", demo.session)
    assert text.code == 0
    header, session_line, *run_lines = text.out.splitlines()
    assert header.split() == ["BYTES", "RECORDS", "RUNS", "INPUT", "OUTPUT", "CACHED"]
    assert session_line.split()[1:] == [str(shown[name]) for name in _COUNTERS]
    assert len(run_lines) == len(demo.runs)


def test_totals_over_sessions_and_per_label(demo: Demo) -> None:
    session = run_cli("--db", str(demo.db), "--json", "usage", demo.session).json()
    totals = run_cli("--db", str(demo.db), "--json", "usage").json()
    (group,) = totals["groups"]
    assert group["sessions"] == 1
    assert {name: group["usage"][name] for name in _COUNTERS} == {
        name: session[name] for name in _COUNTERS
    }
    by_label = run_cli("--db", str(demo.db), "--json", "usage", "--by", "tenant").json()
    assert by_label == {"by": "tenant", "groups": []}  # the demo session carries no label
    none = run_cli("--db", str(demo.db), "usage", "--label", "tenant=none")
    assert none.out == "no sessions\n"
    assert run_cli("--db", str(demo.db), "usage", "--by", "tenant").out == (
        "no session carries label 'tenant'\n"
    )


def test_refusals(demo: Demo, tmp_path: Path) -> None:
    both = run_cli("--db", str(demo.db), "usage", demo.session, "--by", "tenant")
    assert both.code == 2
    assert "give SESSION_ID, or --by/--label" in both.err
    missing = run_cli("--db", str(demo.db), "usage", "no-such-session")
    assert missing.code == 1
    assert missing.err == "agentledger: error: session 'no-such-session' not found\n"
    assert check_invariants(demo.db) == []
