"""What --db names: a path, sqlite:///path, a DSN, a service URL; shown without secrets."""

from __future__ import annotations

import sys

import pytest

from agentledger.errors import ValidationError
from agentledger.target import Target, masked
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
    assert Target.parse(target).kind == kind


def test_display_hides_passwords() -> None:
    assert masked("postgresql://u:secret@db/ledger") == "postgresql://u@db/ledger"
    assert masked("host=db password=secret dbname=x") == "host=db password=*** dbname=x"
    assert masked("host=db password='a b' dbname=x") == "host=db password=*** dbname=x"
    assert masked("postgresql://u@db/x?password=secret&sslmode=disable") == (
        "postgresql://u@db/x?password=***&sslmode=disable"
    )
    assert masked("ledger.db") == "ledger.db"


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://u:s3cret@db/ledger",
        "host=db user=al password=s3cret dbname=ledger",
        "postgresql://u@db/ledger?password=s3cret",
        "https://u:s3cret@ledger.internal",
    ],
)
def test_a_target_never_shows_its_password(text: str) -> None:
    target = Target.parse(text)
    assert "s3cret" not in f"{target} {target!r} {[target]}"
    assert target.text == text  # the backend still gets it


def test_an_empty_target_is_the_default_unless_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLEDGER_DB", "/tmp/x.db")
    assert Target.parse(None).path == "/tmp/x.db"
    assert Target.parse("").path == "/tmp/x.db"
    with pytest.raises(ValidationError):
        Target.parse("", default=False)


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
