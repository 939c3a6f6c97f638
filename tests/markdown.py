"""Python code blocks of the Markdown docs, for the tests that run them.

A block is ```` ```python ```` (run as it stands) or ```` ```python fragment ````
(a piece of a larger program, or one that needs a real key or server: it is
compiled, with top-level ``await`` allowed, but not run).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


@dataclass(frozen=True)
class CodeBlock:
    """One fenced Python block: where it is, its info words, its source."""

    path: Path
    line: int
    info: tuple[str, ...]
    source: str

    @property
    def fragment(self) -> bool:
        return "fragment" in self.info

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def compile(self) -> CodeType:
        """The block's code object; a fragment may use top-level ``await``."""
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if self.fragment else 0
        return compile(self.source, self.name, "exec", flags=flags)


def python_blocks(path: Path) -> list[CodeBlock]:
    """Every Python block of ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    return [
        CodeBlock(
            path=path,
            line=text.count("\n", 0, match.start()) + 1,
            info=tuple(match.group(1).split()),
            source=match.group(2),
        )
        for match in _FENCE.finditer(text)
    ]
