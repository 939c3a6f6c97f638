"""Fixtures of the store service tests: a token file and real served stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.service.process import ServiceProcess, Tokens


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Tokens:
    """One token per role in a fresh token file."""
    return Tokens(tmp_path_factory.mktemp("tokens") / "tokens.json")


@pytest.fixture(scope="module")
def sqlite_service(
    tmp_path_factory: pytest.TempPathFactory, tokens: Tokens
) -> Iterator[ServiceProcess]:
    """``agentledger serve`` in front of a fresh SQLite file."""
    db = tmp_path_factory.mktemp("served") / "store.db"
    with ServiceProcess(str(db), tokens.path) as service:
        yield service


@pytest.fixture(scope="module")
def postgres_service(postgres_dsn: str, tokens: Tokens) -> Iterator[ServiceProcess]:
    """``agentledger serve`` in front of the session's PostgreSQL database."""
    with ServiceProcess(postgres_dsn, tokens.path) as service:
        yield service
