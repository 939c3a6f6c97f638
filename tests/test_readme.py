"""The README's examples are real: every Python block compiles, and the runnable ones run
(twice in one directory, as a reader may run them again); every relative link resolves.

The conformance block (a ``fragment``: it needs your backend) runs in a fresh
project in ``tests/storage/test_conformance_outside.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.markdown import ROOT, CodeBlock, broken_link, python_blocks, relative_links

README = ROOT / "README.md"
BLOCKS = python_blocks(README)


def test_readme_has_examples() -> None:
    assert len([b for b in BLOCKS if not b.fragment]) >= 2  # the tour's; the rest are in docs/


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_readme_example(block: CodeBlock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files (quickstart.db)
    block.run(f"readme_block_{block.line}")


def test_every_python_fence_is_found() -> None:
    """No Python block escapes the test under another fence spelling (``py``, ``python3``)."""
    fences = [line for line in README.read_text().splitlines() if line.startswith("```py")]
    assert len(fences) == len(BLOCKS)


def test_the_readme_links_to_files_and_headings_that_exist() -> None:
    links = relative_links(README)
    assert "docs/cli.md" in links  # the landing page leads to the docs
    assert [why for link in links if (why := broken_link(README, link))] == []


def test_no_install_line_asks_the_package_index_for_agentledger() -> None:
    """agentledger is installed from a checkout or a wheel (README, Install); the name on the
    package index belongs to someone else, so no doc may say `pip install agentledger...`."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            _, found, rest = line.partition("pip install ")
            if found:
                spec = rest.lstrip("'\"` ")
                assert not spec.startswith("agentledger"), f"{doc.name}:{number}: {line}"


def test_docs_say_rules_in_words() -> None:
    """Users have no design document: the README and docs cite no rule ids like `[L2]`."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        assert not re.findall(r"\[[A-Z][0-9]+\]", text), doc.name
        assert "DESIGN" not in text, doc.name


def test_an_example_that_calls_openai_says_it_needs_a_key() -> None:
    """A block running an OpenAI Agents SDK agent (``Runner.run``) calls OpenAI's API: the
    text just before it (since the previous block) says that it needs ``OPENAI_API_KEY``."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = doc.read_text(encoding="utf-8").splitlines()
        blocks = [b for b in python_blocks(doc) if "Runner.run(" in b.source]
        for block in blocks:
            before = lines[: block.line - 1]
            fences = [n for n, line in enumerate(before) if line.startswith("```")]
            lead = before[fences[-1] + 1 :] if fences else before
            assert "OPENAI_API_KEY" in "\n".join(lead) + block.source, block.name
