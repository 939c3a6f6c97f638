"""The CLI under test: ``main(argv)`` in-process for most tests, real processes for a few."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentledger.cli import main

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Done:
    """What one command did: its exit status and what it printed."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


def run_cli(*args: str) -> Done:
    """``agentledger ARGS`` in this process, capturing stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return Done(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def ctrl_c_reaches_children() -> Iterator[None]:
    """Children started inside take SIGINT's default action, even where this process ignores it.

    A process started with SIGINT ignored (a background job of a shell without job
    control, ``make test &``, as some CI runners start the suite) passes that on to the
    processes it starts, and they rightly ignore Ctrl-C. A handled SIGINT is reset to
    the default by exec, so a test that sends Ctrl-C to a child starts it in here
    (in the main thread, where tests run).
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_process(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m agentledger ARGS`` as a real process."""
    base = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"}
    return subprocess.run(
        [sys.executable, "-m", "agentledger", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=120,
    )


@dataclass(frozen=True)
class Demo:
    """A database holding one demo session: its path, the session and its runs."""

    db: Path
    session: str
    runs: list[dict[str, Any]]

    def copy(self, tmp_path: Path) -> Path:
        """A private copy of the database, for commands that write."""
        target = tmp_path / "copy.db"
        shutil.copy(self.db, target)
        return target


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """``agentledger demo --json`` into a fresh file, once for the whole CLI suite."""
    db = tmp_path_factory.mktemp("cli") / "demo.db"
    done = run_cli("--db", str(db), "demo", "--json")
    recorded = done.json()
    assert recorded["db"] == str(db)
    return Demo(db=db, session=recorded["session"]["id"], runs=recorded["runs"])
