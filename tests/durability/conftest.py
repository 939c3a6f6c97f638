"""Fixtures of the power-loss tests: the recorder, compiled once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.durability.image import build_recorder


@pytest.fixture(scope="session")
def recorder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorder library (gcc compiles recorder.c; CI installs Debian's gcc)."""
    if shutil.which("gcc") is None:
        pytest.skip("the power-loss recorder needs gcc (Debian package gcc)")
    return build_recorder(tmp_path_factory.mktemp("recorder"))
