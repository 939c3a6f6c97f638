"""Every command's ``--help`` works, usage errors exit 2, and completion is wired."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import agentledger
from agentledger.cli.app import COMMANDS, cli
from tests.cli.conftest import Demo, run_cli, run_process


def _paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path, read from the CLI itself (a new command is covered at once)."""
    ctx = click.Context(group)
    paths: list[tuple[str, ...]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths.extend(_paths(command, (*prefix, name)))
    return paths


PATHS = _paths(cli)


def test_every_registered_command_is_listed() -> None:
    assert {p[0] for p in PATHS} == set(COMMANDS)
    assert ("session", "end") in PATHS
    assert ("session", "purge") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help(path: tuple[str, ...]) -> None:
    """`agentledger ... --help` exits 0 and prints the command's usage (no KeyError)."""
    done = run_cli(*path, "--help")
    assert done.code == 0, done.err
    assert f"agentledger {' '.join(path)}" in done.out
    assert "usage" in done.out.lower()
    assert done.err == ""


def test_root_help_lists_every_command() -> None:
    done = run_cli("--help")
    assert done.code == 0
    for name in COMMANDS:
        assert f"  {name} " in done.out


def test_bare_agentledger_prints_usage_and_exits_2() -> None:
    """docs/cli.md's promise: usage errors exit 2, a bare command is one."""
    done = run_process()
    assert done.returncode == 2
    assert "Usage: agentledger" in done.stderr
    assert "Commands:" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["records"], "Missing argument 'RUN_ID'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["records", "r", "--limit", "0"], "Invalid value for '--limit'"),
        (["session"], "Usage: agentledger session"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert done.code == 2
    assert message in done.err
    assert "Traceback" not in done.err


def test_version() -> None:
    done = run_cli("--version")
    assert done.code == 0
    assert done.out.startswith("agentledger ")


def test_shell_completion_completes_commands() -> None:
    """click's completion protocol: `agentledger rec<TAB>` offers `records`."""
    done = run_process(
        env={
            "_AGENTLEDGER_COMPLETE": "bash_complete",
            "COMP_WORDS": "agentledger rec",
            "COMP_CWORD": "1",
        }
    )
    assert done.returncode == 0, done.stderr
    assert "records" in done.stdout


def test_help_imports_no_store_and_no_temporal() -> None:
    """`agentledger --help` stays cheap: no backend, no rich, no Temporal SDK."""
    code = (
        "import sys; from agentledger.cli import main; main(['--help']); "
        "heavy = ('temporalio', 'psycopg', 'rich', 'asyncio', 'agentledger.storage'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_python_dash_m_and_worker_help_run() -> None:
    """`python -m agentledger` is the console script; `worker --help` is the worker's own."""
    done = run_process("worker", "--help")
    assert done.returncode == 0, done.stderr
    assert "--temporal HOST:PORT" in done.stdout
    assert "--task-queue" in done.stdout


def test_completion_offers_stored_ids(demo: Demo) -> None:
    """`agentledger --db DB runs demo-<TAB>` offers the session; `records run-<TAB>` its runs;
    a missing database completes nothing (and creates nothing)."""

    def complete(*words: str) -> list[str]:
        done = run_process(
            env={
                "_AGENTLEDGER_COMPLETE": "bash_complete",
                "COMP_WORDS": " ".join(("agentledger", *words)),
                "COMP_CWORD": str(len(words)),
            }
        )
        assert done.returncode == 0, done.stderr
        return [line.split(",", 1)[1] for line in done.stdout.splitlines() if line]

    assert complete("--db", str(demo.db), "runs", "demo-") == [demo.session]
    first = demo.runs[0]["run_id"]
    assert complete("--db", str(demo.db), "records", first[:6]) == [
        r["run_id"] for r in demo.runs if r["run_id"].startswith(first[:6])
    ]
    missing = demo.db.parent / "missing.db"
    assert complete("--db", str(missing), "records", "run-") == []
    assert not missing.exists()


_RULE_ID = re.compile(r"\[[A-Z][0-9]+\]")


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help_says_rules_in_words_not_design_ids(path: tuple[str, ...]) -> None:
    """Users have no design document: no `[L2]`, `[E2]`, `[A1]` in any help text."""
    done = run_cli(*path, "--help")
    assert not _RULE_ID.search(done.out), done.out


def test_no_message_shown_to_users_cites_a_design_id() -> None:
    """Every string literal of the package that is not a docstring (error messages, help,
    printed text) says its rule in words."""
    import ast

    found = []
    for path in sorted((Path(agentledger.__file__).parent).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list):  # docstrings, and attribute docstrings after fields
                docs |= {
                    id(statement.value)
                    for statement in body
                    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and _RULE_ID.search(node.value)
            ):
                found.append(f"{path.name}:{node.lineno}: {node.value[:80]!r}")
    assert found == []


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_every_help_looks_alike(path: tuple[str, ...]) -> None:
    """One help layout for every command, `worker` included: click's usage, options, -h."""
    out = run_cli(*path, "--help").out
    assert out.startswith(f"Usage: agentledger {' '.join(path)} [OPTIONS]"), out
    assert "\nOptions:\n" in out
    assert " -h, --help " in out


def test_the_worker_takes_the_store_given_before_it(tmp_path: Path) -> None:
    """`agentledger --db FILE worker ...` works like every other command (options before
    the command count); the worker opens that store, then finds no Temporal server."""
    db = tmp_path / "ledger.db"
    done = run_process("--db", str(db), "worker", "--temporal", "127.0.0.1:9")
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "agentledger: error: connect: the Temporal server is not reachable at 127.0.0.1:9"
    ), line
    assert db.exists()


def test_the_demo_is_described_as_what_it_runs() -> None:
    """The demo's model is an offline one unless an API key is set: help does not call the
    session it records real."""
    listed = " ".join(run_cli("--help").out.split())
    assert "demo record a demo session (an offline model unless an API key is set)" in listed
    assert "a real" not in listed
    own = " ".join(run_cli("demo", "--help").out.split())
    assert "offline, deterministic demo model, unless ANTHROPIC_API_KEY" in own
