"""Tracing off costs nothing: no provider set, or no OpenTelemetry at all (fresh processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.engine.temporal.processes import ROOT


def _untraced(mode: str, folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.observability.untraced", mode, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_nothing_is_recorded_without_a_provider(tmp_path: Path) -> None:
    """No span is started and no header injected; the same run is traced once a provider is set."""
    result = _untraced("no-provider", tmp_path)
    assert result["status"] == "completed"
    assert result["api_calls"] == {}
    assert result["echoed_traceparent"] == ""
    assert result["traced_status"] == "completed"
    # the run, its two planner turns and model calls, its tool call and its four store writes
    assert result["spans_once_configured"] >= 10


def test_runs_without_opentelemetry_installed(tmp_path: Path) -> None:
    """Without the API the runtime keeps its store unwrapped and runs as before."""
    result = _untraced("no-api", tmp_path)
    assert result == {"status": "completed", "available": False, "store_wrapped": False}
