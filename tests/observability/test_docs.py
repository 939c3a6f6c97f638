"""docs/observability.md: every Python block compiles; the runnable ones run and print what it says.

A block right after a ``<!-- fragment -->`` line needs what a test cannot have (a collector,
a Temporal server, top-level await); it is compiled as the body of an async function.
Runnable blocks set a global tracer provider, so each runs in a fresh process.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.engine.temporal.processes import ROOT

DOC = ROOT / "docs" / "observability.md"
BLOCKS = re.findall(
    r"(<!-- fragment -->\n)?```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S
)


def test_the_doc_has_examples() -> None:
    assert sum(1 for fragment, _ in BLOCKS if not fragment) >= 1
    assert sum(1 for fragment, _ in BLOCKS if fragment) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_doc_example(index: int, tmp_path: Path) -> None:
    fragment, source = BLOCKS[index]
    if fragment:
        compile(f"async def _():\n{textwrap.indent(source, '    ')}", f"block {index}", "exec")
        return
    done = subprocess.run(
        [sys.executable, "-c", source],
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
