"""The docs' examples are real: every Python block of ``docs/*.md`` runs (twice in one
directory, as a reader may run it again), or is a fragment; every relative link resolves.

Fragments (```` ```python fragment ````: a piece of a larger program, or one
needing a key or a server) must still compile. Extraction is shared with
``tests/test_readme.py`` (``tests/markdown.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.markdown import ROOT, CodeBlock, broken_link, python_blocks, relative_links

DOCS = sorted((ROOT / "docs").glob("*.md"))
# Docs whose runnable blocks change process-wide state run in their own test, a process each.
OWN_TEST = {
    "observability.md": "tests/observability/test_docs.py",  # sets a global tracer provider
    "service.md": "tests/service/test_docs.py",  # runs against a real service process
}
BLOCKS = [block for doc in DOCS if doc.name not in OWN_TEST for block in python_blocks(doc)]


def test_every_python_fence_is_found() -> None:
    """No Python block escapes the test under another fence spelling (``py``, ``python3``)."""
    for doc in DOCS:
        fences = [line for line in doc.read_text().splitlines() if line.startswith("```py")]
        assert len(fences) == len(python_blocks(doc)), doc


def test_each_client_has_a_runnable_example() -> None:
    runnable = [b.source for b in python_blocks(ROOT / "docs" / "providers.md") if not b.fragment]
    for client in ("OpenAIChatClient", "OpenAIResponsesClient", "AnthropicClient", "BedrockClient"):
        assert any(f"async with {client}(" in s or f"= {client}(" in s for s in runnable), client


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_docs_example(block: CodeBlock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files
    block.run(f"docs_block_{block.line}")


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_links_point_to_files_and_headings_that_exist(doc: Path) -> None:
    assert [why for link in relative_links(doc) if (why := broken_link(doc, link))] == []
