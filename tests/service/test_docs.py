"""docs/service.md and the README's service section are real: Python runs, commands parse."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest

from agentledger.cli.app import cli
from tests.service.process import ServiceProcess, Tokens

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
TEXT = DOC.read_text(encoding="utf-8")
PYTHON = re.findall(r"```python\n(.*?)```", TEXT, re.S)
README = (DOC.parents[1] / "README.md").read_text(encoding="utf-8")
SECTION = README.split("## The store service", 1)[1].split("\n## ", 1)[0]
COMMANDS = [
    line
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", TEXT + SECTION, re.S)
    for line in block.splitlines()
    if line.strip()
]


def test_the_python_example_runs_against_a_service(
    sqlite_service: ServiceProcess, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    (source,) = PYTHON
    assert "http://127.0.0.1:8470" in source
    monkeypatch.setenv("AGENTLEDGER_TOKEN", tokens.host)
    code = compile(source.replace("http://127.0.0.1:8470", sqlite_service.url), str(DOC), "exec")
    exec(code, {"__name__": "docs_service"})


def _parse(args: list[str]) -> list[str]:
    """Parse ``agentledger ARGS`` as click would, without running it; the command path."""

    def unparsed(ctx: click.Context) -> list[str]:
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args for 9.0
            warnings.simplefilter("ignore", DeprecationWarning)
            return [*ctx.protected_args, *ctx.args]

    ctx = cli.make_context("agentledger", list(args))
    names: list[str] = []
    group: click.Command = cli
    rest = unparsed(ctx)
    while isinstance(group, click.Group) and rest:
        name, command, rest = group.resolve_command(ctx, rest)
        assert command is not None
        assert name is not None
        names.append(name)
        ctx = command.make_context(name, list(rest), parent=ctx)
        group, rest = command, unparsed(ctx)
    return names


@pytest.mark.parametrize("line", COMMANDS)
def test_every_command_parses(line: str, tmp_path: Path) -> None:
    """Each command is a valid ``agentledger`` invocation; ``token new`` really runs."""
    command = re.sub(r"^(\w+=(\$\([^)]*\)|\S+)\s+)+", "", line.split(" > ")[0])  # VAR=... prefix
    argv = shlex.split(command)
    assert argv[0] == "agentledger"
    names = _parse(argv[1:])
    if names[0] == "token":
        done = subprocess.run([sys.executable, "-m", "agentledger", *argv[1:]], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "tokens.json").is_file()
