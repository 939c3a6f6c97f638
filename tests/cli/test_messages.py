"""Refusals that tell the user what to do next: the store kinds --db takes, where an
encrypted database's keys go, a service or Temporal server that does not answer, a token
the service does not know, a session id given where a run id is expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Demo, run_cli, run_process
from tests.service.process import ServiceProcess, Tokens, free_port


def test_a_db_of_an_unsupported_kind_names_the_kinds_taken() -> None:
    done = run_cli("--db", "mysql://app:hunter2@db.example/ledger", "sessions")
    assert done.code == 1
    assert done.err.startswith("agentledger: error: mysql://app@db.example/ledger: "), done.err
    assert "does not store in mysql" in done.err
    assert "a SQLite file path, a postgresql:// DSN or an http(s):// service URL" in done.err
    assert "hunter2" not in done.err
    assert "no database at" not in done.err


def test_a_service_that_does_not_answer_is_named_with_how_to_start_one() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = run_cli("--store", url, "sessions")
    assert done.code == 1
    assert f"the store service is not reachable at {url} (connection refused)" in done.err
    assert "`agentledger serve` starts one" in done.err
    assert "ClientConnectorError" not in done.err
    assert "ssl:default" not in done.err


def test_a_401_names_the_token_variable(
    demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = Tokens(tmp_path / "tokens.json")
    with ServiceProcess(str(demo.copy(tmp_path)), tokens.path) as service:
        monkeypatch.delenv("AGENTLEDGER_TOKEN", raising=False)
        missing = run_cli("--store", service.url, "sessions")
        monkeypatch.setenv("AGENTLEDGER_TOKEN", "alt_not-a-token")
        unknown = run_cli("--store", service.url, "sessions")
    for done, reason in ((missing, "no bearer token"), (unknown, "unknown token")):
        assert done.code == 1
        assert f"access denied (401): {reason}" in done.err, done.err
        assert "$AGENTLEDGER_TOKEN" in done.err, done.err
        assert "`agentledger token new` makes one" in done.err


def test_a_temporal_server_that_does_not_answer_is_named_in_words(
    demo: Demo, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{free_port()}"
    done = run_process("worker", "--temporal", address, "--db", str(demo.copy(tmp_path)))
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert f"the Temporal server is not reachable at {address} (connection refused)" in (
        done.stderr
    )
    assert "tonic" not in done.stderr


@pytest.mark.parametrize("command", ["records", "transcript", "prompts", "tail"])
def test_a_session_id_where_a_run_id_goes_says_so(demo: Demo, command: str) -> None:
    done = run_cli("--db", str(demo.db), command, demo.session)
    assert done.code == 1
    assert done.err == (
        f"agentledger: error: {demo.session} is a session, not a run: "
        f"`agentledger runs {demo.session}` lists its runs\n"
    )
    unknown = run_cli("--db", str(demo.db), "--json", command, "no-such-run")
    assert '"type":"RunNotFoundError"' in unknown.err
    assert "run 'no-such-run' not found" in unknown.err
