"""The root ``agentledger`` group, its command registry, shared options and exit codes.

Commands are registered by name in :data:`COMMANDS` as ``module:attribute``
and imported only when used (or listed by ``--help``), so every command
pays only for what it imports. Exit status: 0 on success, 1 when
agentledger refuses (one line on stderr, no traceback; a JSON object with
``--json``; a missing optional extra named with its install command), 2 for usage errors
(a bare ``agentledger`` prints its usage and exits 2), 130 on Ctrl-C.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

import click

from agentledger.cli.refusal import missing_extra, report, wants_json
from agentledger.errors import (
    AgentledgerError,
    ContractError,
    CorruptArchiveError,
    CorruptRecordError,
    RunNotFoundError,
    SessionPurgedError,
)
from agentledger.target import Target

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore

__all__ = [
    "COMMANDS",
    "SQLITE_HELP",
    "STORE_HELP",
    "CommandError",
    "Given",
    "Settings",
    "cli",
    "label_option",
    "main",
    "settings_options",
    "with_store",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

COMMANDS: dict[str, str] = {
    "demo": "agentledger.cli.demo:demo",
    "sessions": "agentledger.cli.sessions:sessions",
    "runs": "agentledger.cli.runs:runs",
    "usage": "agentledger.cli.usage:usage",
    "records": "agentledger.cli.records:records",
    "transcript": "agentledger.cli.transcript:transcript",
    "prompts": "agentledger.cli.prompts:prompts",
    "tail": "agentledger.cli.tail:tail",
    "search": "agentledger.cli.search:search",
    "check": "agentledger.cli.check:check",
    "repair": "agentledger.cli.repair:repair",
    "session": "agentledger.cli.sessions:session",
    "archive": "agentledger.cli.archive:archive",
    "restore": "agentledger.cli.archive:restore",
    "retention": "agentledger.cli.archive:retention",
    "export": "agentledger.cli.interchange:export",
    "import": "agentledger.cli.interchange:import_",
    "worker": "agentledger.cli.worker:worker",
    "serve": "agentledger.cli.service:serve",
    "token": "agentledger.cli.service:token",
    "keys": "agentledger.cli.keys:keys",
    "migrate": "agentledger.cli.migrate:migrate",
}
"""Every command, in the order ``--help`` lists them: name -> ``module:attribute``."""

TARGET_HELP = (
    "the store: a SQLite file (default: $AGENTLEDGER_DB, else ./agentledger.db), "
    "a postgresql:// DSN, or an http(s):// service URL (token in $AGENTLEDGER_TOKEN)"
)


class CommandError(ContractError):
    """A refusal the CLI words itself (exit 1), e.g. naming the damaged file.

    Attributes:
        subject: what it is about (the store shown without secrets, a run, a
            file), or "" when the message says it all.
    """

    def __init__(self, message: str, *, subject: str = "") -> None:
        super().__init__(message)
        self.subject = subject


@dataclass(frozen=True)
class Settings:
    """The options every store command shares (given on the command or before it)."""

    target: Target
    """What ``--db``/``--store`` named (a path, a DSN or a URL), else the default."""
    json: bool
    """Print JSON instead of text."""


@dataclass(frozen=True)
class Given:
    """The options given before the command (``agentledger --db X --json CMD``)."""

    target: str | None
    json: bool


SQLITE_HELP = "the SQLite file (default: $AGENTLEDGER_DB, else ./agentledger.db)"
STORE_HELP = (
    "a SQLite file (default: $AGENTLEDGER_DB, else ./agentledger.db) or a postgresql:// DSN"
)


@overload
def settings_options(command: F, *, target_help: str = ...) -> F: ...
@overload
def settings_options(command: None = None, *, target_help: str = ...) -> Callable[[F], F]: ...
def settings_options(command: F | None = None, *, target_help: str = TARGET_HELP) -> Any:
    """Add ``--db``/``--store`` and ``--json`` to a command; it receives ``settings``.

    A value given on the command wins over one given before it
    (``agentledger --json records RUN`` and ``agentledger records RUN --json``).
    ``target_help`` describes the targets the command takes, when not all three
    (``@settings_options(target_help=SQLITE_HELP)``).
    """
    if command is None:
        return lambda later: settings_options(later, target_help=target_help)

    def merged(*args: Any, target: str | None, json: bool, **kwargs: Any) -> Any:
        root = click.get_current_context().find_root().obj
        outer = root if isinstance(root, Given) else Given(target=None, json=False)
        kwargs["settings"] = Settings(
            target=Target.parse(target or outer.target), json=json or outer.json
        )
        return command(*args, **kwargs)

    merged.__name__ = command.__name__
    merged.__doc__ = command.__doc__
    merged = click.option("--json", is_flag=True, help="print JSON instead of text")(merged)
    merged = click.option("--db", "--store", "target", metavar="TARGET", help=target_help)(merged)
    return merged


def _labels_given(
    ctx: click.Context, param: click.Parameter, given: tuple[str, ...]
) -> dict[str, str]:
    """The ``--label KEY=VALUE`` options given, as a mapping."""
    labels = {}
    for text in given:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="--label")
        labels[key] = value
    return labels


label_option = click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_labels_given,
    help="only sessions carrying this label (repeatable; all must match)",
)
"""``--label KEY=VALUE``, repeatable: the command receives ``labels``, a mapping."""


def run(main: Awaitable[T]) -> T:
    """Run a command's coroutine to completion (asyncio is imported only when one runs)."""
    import asyncio

    async def wrapper() -> T:
        return await main

    return asyncio.run(wrapper())


async def with_store(
    settings: Settings, use: Callable[[AdminStore], Awaitable[T]], *, read_only: bool = True
) -> T:
    """Open the store ``settings`` names, run ``use`` on it and close it.

    A damaged database (an error with no run to blame) is reported with the
    file or DSN it came from.
    """
    from agentledger.cli.target import opened

    try:
        async with opened(settings.target, read_only=read_only) as store:
            try:
                return await use(store)
            except RunNotFoundError as e:
                raise await _mistaken_id(store, e) from e
    except CorruptRecordError as e:
        if e.run_id or e.record_id or isinstance(e, CorruptArchiveError):
            raise
        raise CommandError(
            f"{settings.target}: the database is damaged ({e.reason})",
            subject=str(settings.target),
        ) from e
    except SessionPurgedError as e:
        if not read_only:
            raise
        what = (
            f"run {e.run_id} belonged to session {e.session_id}, which"
            if e.run_id
            else (f"session {e.session_id}")
        )
        raise CommandError(
            f"{what} was purged: its runs, records and checkpoints are deleted "
            f"(`agentledger session purge {e.session_id}` prints its receipt again)",
            subject=f"session {e.session_id}",
        ) from e


async def _mistaken_id(store: AdminStore, error: RunNotFoundError) -> RunNotFoundError:
    """``error``, or, when its run id is a session's, the same error saying so."""
    try:
        await store.load_session(error.run_id)
    except AgentledgerError:
        return error
    worded = RunNotFoundError(run_id=error.run_id)
    worded.message = (
        f"{error.run_id} is a session, not a run: `agentledger runs {error.run_id}` lists its runs"
    )
    worded.args = (worded.message,)
    return worded


class _Registry(click.Group):
    """A group whose commands are imported on first use, from :data:`COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        import importlib

        module, _, attribute = spec.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command), spec
        return command


def _version() -> str:
    import agentledger

    return str(agentledger.__version__)


@click.group(
    cls=_Registry,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option("--db", "--store", "target", metavar="TARGET", help=TARGET_HELP)
@click.option("--json", is_flag=True, help="print JSON instead of text")
@click.version_option(version=None, package_name="agentledger", message="agentledger %(version)s")
@click.pass_context
def cli(ctx: click.Context, target: str | None, json: bool) -> None:
    """Durable memory, sessions and runs for AI agents: inspect and administer a store.

    Exit status: 0 on success, 1 when agentledger refuses (one line on stderr),
    2 for usage errors. Shell completion (bash, zsh, fish):
    eval "$(_AGENTLEDGER_COMPLETE=bash_source agentledger)".
    """
    ctx.obj = Given(target=target, json=json)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``) and return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="agentledger", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:  # usage errors (2), and click's own refusals (1)
        e.show()
        return e.exit_code
    except click.Abort:  # Ctrl-C (click turns KeyboardInterrupt into Abort)
        return 130
    except AgentledgerError as e:
        report(e, json=wants_json(args))
        return 1
    except ImportError as e:  # an optional extra this installation lacks: named, one line
        missing = missing_extra(e)
        if missing is None:
            raise
        report(missing, json=wants_json(args))
        return 1
    except BrokenPipeError:  # e.g. `agentledger records RUN | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # a file the user named: missing, unwritable, a directory...
        where = f": {e.filename}" if e.filename else ""
        report(
            CommandError(f"{e.strerror or e}{where}", subject=str(e.filename or "")),
            json=wants_json(args),
        )
        return 1
    return code if isinstance(code, int) else 0
