"""Areas import one way: the transcript model knows nothing of storage (replay, which reads a
store, lives in ``agentledger.storage.replay`` and is only named by the transcript package)."""

from __future__ import annotations

import subprocess
import sys


def _imported_by(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_the_transcript_model_does_not_import_storage() -> None:
    loaded = _imported_by("agentledger.transcript")
    assert not {m for m in loaded if m.startswith("agentledger.storage")}


def test_replay_is_still_reachable_from_the_transcript_package() -> None:
    from agentledger.storage.replay import build_messages_from_run_log
    from agentledger.transcript import build_messages_from_run_log as named

    assert named is build_messages_from_run_log


def test_observability_does_not_import_the_runtime() -> None:
    loaded = _imported_by("agentledger.observability")
    assert not {m for m in loaded if m.startswith("agentledger.runtime")}


def test_the_read_model_does_not_import_the_service_or_the_cli() -> None:
    loaded = _imported_by("agentledger.views")
    assert not {m for m in loaded if m.startswith(("agentledger.service", "agentledger.cli"))}
