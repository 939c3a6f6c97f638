"""Fixtures shared across the test tree."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.storage.postgres.server import PostgresServer, create_database, drop_database

PG_DSN_ENV = "AGENTLEDGER_TEST_PG_DSN"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session; deleted afterwards.

    Uses the server named by ``AGENTLEDGER_TEST_PG_DSN`` if set (its user needs
    CREATEDB), else starts a throwaway server (``tests/storage/postgres/server.py``).
    Never skips: if no server can be had, every test using it errors with the reason.
    """
    server = None
    base = os.environ.get(PG_DSN_ENV, "")
    if not base:
        server = PostgresServer()
        base = server.start()
    try:
        dsn = create_database(base)
        try:
            yield dsn
        finally:
            drop_database(dsn)
    finally:
        if server is not None:
            server.stop()
