"""``--temporal HOST:PORT`` and ``--namespace`` on ``check``, ``runs`` and ``serve`` (the worker's
options, parsed once): their help says what a paused run is and what to do; a server that
cannot be reached is refused in one line, exit 1. Paused runs themselves are shown in
tests/engine/temporal/test_loop_failures.py (CLI) and tests/service/inspector/test_paused.py."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Demo, run_cli, run_process

NOWHERE = "127.0.0.1:9"


@pytest.mark.parametrize("command", ["check", "runs", "serve", "worker"])
def test_the_same_temporal_options_everywhere(command: str) -> None:
    out = " ".join(run_cli(command, "--help").out.split())
    assert "--temporal HOST:PORT" in out
    assert "--namespace TEXT the Temporal namespace [default: default]" in out


@pytest.mark.parametrize("command", ["check", "runs"])
def test_help_says_what_a_paused_run_is_and_what_to_do(command: str) -> None:
    out = " ".join(run_cli(command, "--help").out.split())
    assert "whose workflow task keeps failing on Temporal (a bug in the run loop" in out
    assert "Deploy workers with fixed code; the run continues by itself" in out
    assert "paused" in out


def test_check_refuses_a_temporal_server_it_cannot_reach(demo: Demo) -> None:
    done = run_process("check", "--db", str(demo.db), "--temporal", NOWHERE)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"agentledger: error: connect: the Temporal server is not reachable at {NOWHERE}"
    ), line
    as_json = run_process("check", "--db", str(demo.db), "--temporal", NOWHERE, "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stderr)["error"]["type"] == "TransientError"


def test_runs_refuses_a_temporal_server_it_cannot_reach(demo: Demo) -> None:
    done = run_process("runs", demo.session, "--db", str(demo.db), "--temporal", NOWHERE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"agentledger: error: connect: the Temporal server is not reachable at {NOWHERE}"
    ), line


def test_without_temporal_check_json_is_unchanged(demo: Demo) -> None:
    """No ``paused`` key unless a server was named: scripts reading it keep working."""
    assert "paused" not in run_cli("check", "--db", str(demo.db), "--json").json()
