"""Python code blocks of the Markdown docs, for the tests that run them.

A block is ```` ```python ```` (run as it stands, twice, as a reader may run an
example again) or ```` ```python fragment ```` (a piece of a larger program, or one
that needs a real key or server: it is compiled, with top-level ``await`` allowed,
but not run). Links between the pages are checked here too.
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

    def run(self, module: str) -> None:
        """Compile the block and, unless it is a fragment, run it twice in the current
        directory: a reader who runs an example again must not meet what its first run left
        (a session id it purged, a file it wrote)."""
        code = self.compile()
        if not self.fragment:
            for _ in range(2):
                exec(code, {"__name__": module})


_ANY_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings (code blocks skipped; repeats get -1, -2, ...)."""
    prose = _ANY_FENCE.sub("", path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for line in prose.splitlines():
        if re.match(r"#{1,6} ", line):
            slug = base = _slug(line.lstrip("#"))
            n = 0
            while slug in found:
                n += 1
                slug = f"{base}-{n}"
            found.add(slug)
    return found


def relative_links(path: Path) -> list[str]:
    """The targets of the Markdown links and images of ``path`` that stay in the repository
    (no scheme, not in a code block), as written."""
    prose = _ANY_FENCE.sub("", path.read_text(encoding="utf-8"))
    return [t for t in _LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def broken_link(path: Path, target: str) -> str | None:
    """Why ``target``, a relative link of ``path``, points nowhere; None when it resolves."""
    file, _, anchor = target.partition("#")
    where = (path.parent / file).resolve() if file else path
    if not where.exists():
        return f"{path.relative_to(ROOT)}: {target}: no such file"
    if anchor and where.suffix == ".md" and anchor not in anchors(where):
        return f"{path.relative_to(ROOT)}: {target}: no such heading"
    return None


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
