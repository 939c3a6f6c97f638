"""What --db names: a path, sqlite:///path, a DSN, a service URL; shown without secrets."""

from __future__ import annotations

import sys

import pytest

from agentledger.cli.app import display
from agentledger.cli.target import kind_of
from tests.cli.conftest import Demo, run_cli


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        ("agentledger.db", "sqlite"),
        ("sqlite:///tmp/x.db", "sqlite"),
        ("postgresql://u@db/ledger", "postgres"),
        ("postgres://u@db/ledger", "postgres"),
        ("host=db dbname=ledger", "postgres"),
        ("http://127.0.0.1:8000", "service"),
        ("https://ledger.internal", "service"),
    ],
)
def test_kind_of(target: str, kind: str) -> None:
    assert kind_of(target) == kind


def test_display_hides_passwords() -> None:
    assert display("postgresql://u:secret@db/ledger") == "postgresql://u@db/ledger"
    assert display("host=db password=secret dbname=x") == "host=db password=*** dbname=x"
    assert display("host=db password='a b' dbname=x") == "host=db password=*** dbname=x"
    assert display("ledger.db") == "ledger.db"


def test_a_sqlite_url_works(demo: Demo) -> None:
    done = run_cli("--db", f"sqlite:///{demo.db}", "sessions")
    assert done.code == 0
    assert demo.session in done.out


def test_a_service_url_without_the_service_package_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The URL branch imports agentledger.service lazily; without it, one line says so."""
    monkeypatch.setitem(sys.modules, "agentledger.service", None)  # makes the import fail
    done = run_cli("--db", "http://127.0.0.1:9", "sessions")
    assert done.code == 1
    assert done.err.startswith("agentledger: error: http://127.0.0.1:9: a service URL needs")
    assert done.err.count("\n") == 1


def test_a_json_flag_anywhere_and_env_default(demo: Demo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLEDGER_DB", str(demo.db))
    done = run_cli("sessions", "--json")
    assert done.json()["sessions"][0]["id"] == demo.session
