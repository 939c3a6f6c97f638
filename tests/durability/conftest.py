"""Fixtures of the power-loss tests: the recorder, compiled once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.durability.image import build_recorder


def _install_gcc() -> None:
    """Install Debian's gcc as the PostgreSQL tests install the server: root with apt-get."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail("the power-loss recorder needs gcc (Debian package gcc), and it cannot be "
                    "installed here (needs root and apt-get)")  # fmt: skip
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "gcc", "libc6-dev"],
    ):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            pytest.fail(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorder library (gcc compiles recorder.c; installed from Debian if missing)."""
    if shutil.which("gcc") is None:
        _install_gcc()
    return build_recorder(tmp_path_factory.mktemp("recorder"))
