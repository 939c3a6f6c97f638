"""A venv of its own for a peer whose packages the test venv does not hold, built once.

Built with uv on first use, under a file lock, so two pytest-xdist workers never
build the same venv at once; later runs reuse it (one made elsewhere, e.g. by the
bench, is completed in place). Never skipped: a venv that cannot be built fails the
tests that need it, with uv's reason.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

from tests.installs import UV

__all__ = ["ROOT", "peer_python"]

ROOT = Path(__file__).resolve().parents[2]


def peer_python(venv: Path, *install: str | Path) -> Path:
    """The interpreter of ``venv``, made first (``uv pip install *install``) if absent."""
    python = venv / "bin" / "python"
    lock = venv.with_name(venv.name + ".lock")
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = venv / ".installed"
        if not done.exists():
            subprocess.run(
                [UV, "venv", "-q", "--allow-existing", "--python", sys.executable, venv],
                check=True,
            )
            subprocess.run(
                [UV, "pip", "install", "-q", "--python", python, *install], check=True, cwd=ROOT
            )
            done.touch()
    return python
