"""Real installs for the tests: the wheel built from this tree, in fresh virtualenvs.

``uv`` builds and installs offline (from uv's cache, filled when ``make test``
set up ``.venv``). The session fixtures in ``tests/conftest.py`` build the wheel
and one core-only venv once; :func:`run_in` runs a command there with no trace
of this repository's venv or import path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.markdown import ROOT

__all__ = [
    "UV",
    "build_wheel",
    "clean_env",
    "copy_checkout",
    "make_venv",
    "run_in",
    "uv_install",
]

UV = Path(sys.executable).with_name("uv")  # installed in .venv by the Makefile


def clean_env() -> dict[str, str]:
    """The environment without this repo's venv, import path or agentledger settings."""
    drop = ("PYTHON", "PYTEST", "VIRTUAL_ENV", "UV_", "AGENTLEDGER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def run_in(
    argv: list[str | Path],
    cwd: Path,
    *,
    check: bool = True,
    timeout: float = 300,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd`` with :func:`clean_env` (and ``env``); with ``check``, it must
    exit 0."""
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env={**clean_env(), **(env or {})},
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(out: Path) -> Path:
    """The wheel of this tree, built into ``out``."""
    run_in([UV, "build", "--offline", "--wheel", "--out-dir", out, ROOT], cwd=out)
    (built,) = out.glob("agentledger-*.whl")
    return built


def make_venv(home: Path) -> Path:
    """A fresh, empty virtualenv at ``home``; returns ``home``."""
    run_in([UV, "venv", "--offline", "--python", sys.executable, home], cwd=home.parent)
    return home


def uv_install(venv: Path, *requirements: str | Path, cwd: Path) -> None:
    """``pip install REQUIREMENTS`` into ``venv``, done by uv offline."""
    python = venv / "bin" / "python"
    run_in([UV, "pip", "install", "--offline", "--python", python, *requirements], cwd=cwd)


def copy_checkout(dest: Path) -> Path:
    """A copy of this checkout's tracked files (as a fresh clone has them) at ``dest``."""
    tracked = run_in(["git", "ls-files", "-z"], ROOT).stdout.split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((ROOT / name).read_bytes())
    return dest
