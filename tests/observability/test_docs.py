"""docs/observability.md: every Python block compiles; the runnable ones run and print what it says.

A ```` ```python fragment ```` block needs what a test cannot have (a collector, a Temporal
server, top-level await); it is compiled only. Runnable blocks set a global tracer provider,
so each runs in a fresh process (``tests/test_docs.py`` leaves this file to this test).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.markdown import ROOT, CodeBlock, python_blocks

DOC = ROOT / "docs" / "observability.md"
BLOCKS = python_blocks(DOC)


def test_the_doc_has_examples() -> None:
    assert sum(1 for block in BLOCKS if not block.fragment) >= 1
    assert sum(1 for block in BLOCKS if block.fragment) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_doc_example(block: CodeBlock, tmp_path: Path) -> None:
    block.compile()
    if block.fragment:
        return
    done = subprocess.run(
        [sys.executable, "-c", block.source],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = re.search(r"It prints:\n\n```\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert printed is not None
    assert done.stdout == printed.group(1)
