"""The examples run as written: each is executed as a script in a fresh directory."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import Message, validate_planner_transcript

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_runs_and_records_its_run(tmp_path: Path) -> None:
    """[R2] the quick start prints the answer and leaves a valid transcript in its database."""
    script = EXAMPLES / "quickstart.py"
    code_lines = [line for line in script.read_text().splitlines() if line.strip()]
    assert len(code_lines) <= 30, "the quick start must stay under 30 lines"
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    status, *_, run_id = done.stdout.split()
    assert status == "completed"
    assert "18°C and rainy." in done.stdout
    messages = asyncio.run(_transcript(tmp_path / "quickstart.db", run_id))
    validate_planner_transcript(messages)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]


async def _transcript(path: Path, run_id: str) -> list[Message]:
    store = await SQLiteStore.open(path)
    try:
        return await build_messages_from_run_log(store, run_id)
    finally:
        await store.close()
