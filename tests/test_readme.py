"""The README's examples are real: every Python block compiles, and the runnable ones run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
# A block that names a placeholder backend shows how to subclass; it compiles but cannot run.
PLACEHOLDERS = ("MyStore",)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files (quickstart.db)
    source = BLOCKS[index]
    code = compile(source, f"README.md block {index}", "exec")
    if any(name in source for name in PLACEHOLDERS):
        return
    exec(code, {"__name__": f"readme_block_{index}"})
