"""The conformance snippet of docs/store.md works in someone else's project.

It is written, unchanged, into a fresh directory with its own pytest config
(strict pytest-asyncio mode, warnings as errors, nothing from this repo's
pyproject) next to a ``mystore`` module naming a real backend, and pytest runs
there as a subprocess: for SQLite with the process races, for a MemoryStore
(one process) with ``process_races = False``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentledger._extras import install_command
from tests.markdown import ROOT, python_blocks

SNIPPET = next(
    b for b in python_blocks(ROOT / "docs" / "store.md") if "StoreConformance" in b.source
)
CLASS_LINE = "class TestMyStore(StoreConformance):\n"

# Strict mode, and warnings as errors so that pytest-asyncio's deprecation of async
# @pytest.fixture in strict mode would fail the run; pytest-asyncio itself warns when
# its default fixture loop scope is unset, so the project sets it, as projects do.
CONFIG = """\
[tool.pytest.ini_options]
asyncio_mode = "strict"
asyncio_default_fixture_loop_scope = "function"
filterwarnings = ["error"]
"""

BACKENDS = {
    "sqlite": "from agentledger.storage.sqlite import SQLiteStore as MyStore\n",
    "memory": '''\
from agentledger.storage import MemoryStore


class MyStore(MemoryStore):
    """One MemoryStore per path, so handles opened on one path share data (each handle
    closed on its own, as a file's would be)."""

    _opened: dict[str, "MyStore"] = {}

    @classmethod
    async def open(cls, path):
        return cls._opened.setdefault(str(path), cls()).handle()
''',
}
# The whole suite for the fast MemoryStore; for SQLite (a fresh file per test) the
# tests that lean on what the snippet sets up: a sync test on the async fixture,
# two handles, and processes opened by the opener.
SELECT = {
    "sqlite": "state_machine or races_across_processes or test_race_identical_root_starts",
    "memory": "",
}
# Appended after the snippet: fewer random sequences keep this test lean.
TUNING = "\n\nTestMyStore.stateful_examples = 5\n"


def _project(tmp_path: Path, backend: str) -> Path:
    project = tmp_path / f"outside-{backend}"
    project.mkdir()
    (project / "pyproject.toml").write_text(CONFIG)
    (project / "mystore.py").write_text(BACKENDS[backend])
    test = SNIPPET.source
    if backend == "memory":
        assert CLASS_LINE in test
        test = test.replace(CLASS_LINE, CLASS_LINE + "    process_races = False\n\n")
    (project / "test_mystore.py").write_text(test + TUNING)
    return project


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_readme_snippet_passes_in_a_fresh_project(tmp_path: Path, backend: str) -> None:
    project = _project(tmp_path, backend)
    select = ["-k", SELECT[backend]] if SELECT[backend] else []
    done = _pytest(project, "-rA", *select)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in summary, summary
    assert "skipped" not in summary, summary
    assert "PASSED test_mystore.py::TestMyStore::test_state_machine" in done.stdout
    processes = "PASSED test_mystore.py::TestMyStore::test_races_across_processes" in done.stdout
    assert processes is (backend == "sqlite"), done.stdout[-4000:]


def test_import_without_pytest_names_the_extra(tmp_path: Path) -> None:
    """Without pytest, importing the suite is a ModuleNotFoundError with the install hint."""
    code = (
        "import sys\n"
        "sys.modules['pytest'] = None\n"  # what an environment without pytest looks like
        "try:\n"
        "    import agentledger.storage.conformance\n"
        "except ModuleNotFoundError as e:\n"
        "    print(type(e).__name__, e.name, '|', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert done.stdout.strip() == (
        "ModuleNotFoundError pytest | agentledger.storage.conformance needs agentledger's "
        f"[conformance] extra, which is not installed (no module 'pytest'): "
        f"{install_command('conformance')}"
    )
