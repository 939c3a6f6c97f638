"""Every `agentledger ...` line in a shell block of the README and docs parses as written.

The Python blocks run in ``tests/test_docs.py``; a shell line needs a server, a
key or a database, so it is parsed, not run: its command path must exist and
its options and arguments must be ones that command takes.
"""

from __future__ import annotations

import re
import shlex

import click
import pytest

from agentledger.cli.app import cli
from tests.markdown import ROOT

_SHELL = re.compile(r"^```(?:sh|bash|console)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _command_lines() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in _SHELL.finditer(text):
            first = text.count("\n", 0, block.start()) + 2
            joined = block.group(1).replace("\\\n", " ")
            for offset, line in enumerate(joined.splitlines()):
                if line.removeprefix("$ ").startswith("agentledger "):
                    found.append((f"{doc.relative_to(ROOT)}:{first + offset}", line))
    return found


LINES = _command_lines()


def _parse(words: list[str]) -> None:
    """Resolve the command path and parse its options as the CLI would, without running it."""
    command: click.Command = cli
    name = "agentledger"
    parent: click.Context | None = None
    while True:  # each context a child of the one before, as when the CLI runs
        ctx = command.make_context(name, list(words), parent=parent, resilient_parsing=False)
        parent = ctx
        if not isinstance(command, click.Group):
            return
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            return
        name, sub, words = command.resolve_command(ctx, rest)
        assert sub is not None
        assert name is not None
        command = sub


def test_the_docs_show_commands() -> None:
    assert any("retention" in line for _, line in LINES)


@pytest.mark.parametrize(("where", "line"), LINES, ids=[w for w, _ in LINES])
def test_a_documented_command_parses(where: str, line: str) -> None:
    words = shlex.split(line.removeprefix("$ "), comments=True)
    for i, word in enumerate(words):  # the shell's part of the line: redirection, pipes, &&
        if word in {">", ">>", "<", "|", "&&", ";", "&"}:
            words = words[:i]
            break
    try:
        _parse(words[1:])
    except click.exceptions.UsageError as e:
        pytest.fail(f"{where}: {line.strip()}\n{e.format_message()}")
