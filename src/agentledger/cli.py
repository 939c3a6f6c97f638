"""The ``agentledger`` command line: run the demo, inspect and administer a database.

Exit status: 0 on success, 1 when agentledger refuses (a one-line message on
stderr, no traceback), 2 for usage errors. ``--json`` prints machine-readable
output instead of tables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agentledger import __version__
from agentledger.errors import AgentledgerError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.sqlite import SQLiteStore, default_path
from agentledger.storage.types import Record, RunMeta, Session
from agentledger.storage.validation import MAX_PAGE_LIMIT
from agentledger.transcript import (
    CitationsPart,
    ImagePart,
    JsonNumber,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    encode_messages,
)
from agentledger.transcript.replay import build_messages_from_run_log

__all__ = ["main"]


_STORE_HELP = "a store service instead of --db (token from $AGENTLEDGER_TOKEN)"


def _options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--db", default=default, metavar="PATH", help="SQLite database (default: %(default)s)"
    )
    parser.add_argument("--json", action="store_true", default=default, help="print JSON")
    parser.add_argument("--store", default=default, metavar="URL", help=_STORE_HELP)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentledger", description="Durable memory, sessions and runs for AI agents."
    )
    parser.add_argument("--version", action="version", version=f"agentledger {__version__}")
    parser.add_argument("--db", default=None, metavar="PATH", help="SQLite database (default: "
                        "$AGENTLEDGER_DB or ./agentledger.db)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--store", default=None, metavar="URL", help=_STORE_HELP)
    shared = argparse.ArgumentParser(add_help=False)
    _options(shared, argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser(
        "demo", parents=[shared], help="run a real multi-turn agent session into the database"
    )
    commands.add_parser("sessions", parents=[shared], help="list sessions")
    runs = commands.add_parser(
        "runs", parents=[shared], help="a session's runs, as a table and a tree"
    )
    runs.add_argument("session_id")
    records = commands.add_parser("records", parents=[shared], help="a run's records in order")
    records.add_argument("run_id")
    transcript = commands.add_parser(
        "transcript", parents=[shared], help="a run's transcript, rebuilt from its records"
    )
    transcript.add_argument("run_id")
    session = commands.add_parser("session", help="end or purge a session")
    actions = session.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (
        ("end", "end a session (no new work)"),
        ("purge", "delete an ended session"),
    ):
        action = actions.add_parser(name, parents=[shared], help=text)
        action.add_argument("session_id")
    from agentledger.engine.temporal.cli import add_worker_command

    add_worker_command(commands)  # `agentledger worker`: needs the temporal extra to run
    from agentledger.service.commands import add_service_commands

    add_service_commands(commands)  # `agentledger serve`, `token new`: the service extra
    return parser


# ---------------------------------------------------------------- rendering


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode())
    raise TypeError(type(value).__name__)


_JSON = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")


def _dump(value: Any) -> str:
    return _JSON.encode(value).decode()


def _short(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(value: datetime | None) -> str:
    return "" if value is None else value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _part(part: Part) -> str:
    match part:
        case TextPart():
            return part.text
        case ThinkingPart():
            return f"(thinking) {part.text}"
        case ToolUsePart():
            return f"→ {part.name}({_dump(part.input)}) [{part.id}]"
        case ToolResultPart():
            flag = " ERROR" if part.is_error else ""
            return f"← [{part.tool_use_id}]{flag} {_dump(part.content)}"
        case CitationsPart():
            return f"{part.text} [{len(part.citations)} citation(s)]"
        case ImagePart():
            return f"(image {part.format})"
    return f"({part.__struct_config__.tag})"


class _Table(Table):
    """A table whose cells fold instead of being cut (ids must stay copyable) and are
    shown verbatim (a tool id like ``[call_1]`` is not console markup)."""

    def row(self, *cells: str) -> None:
        self.add_row(*(Text(cell) for cell in cells))


def _table(title: str, *columns: str) -> _Table:
    table = _Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _console() -> Console:
    console = Console(highlight=False)
    return console if console.is_terminal else Console(highlight=False, width=160)


def _payload(record: Record) -> Any:
    try:
        return msgspec.json.decode(record.payload)
    except msgspec.DecodeError:
        return record.payload.decode("utf-8", "replace")


# ----------------------------------------------------------------- commands


async def _sessions(store: SQLiteStore, args: argparse.Namespace, out: Console) -> None:
    """[D6] every session, newest first, read page by page."""
    sessions: list[Session] = []
    cursor = ""
    while True:
        page = await store.list_sessions(cursor=cursor, limit=MAX_PAGE_LIMIT)
        sessions.extend(page.sessions)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    if args.json:
        print(_dump([msgspec.structs.asdict(s) for s in sessions]))
        return
    table = _table("sessions", "session", "status", "created", "ended", "labels", "runs")
    for s in sessions:
        count = len(await store.list_runs_by_session(s.id))
        labels = " ".join(f"{k}={v}" for k, v in s.labels.items())
        created, ended = _when(s.created_at), _when(s.ended_at)
        table.row(s.id, str(s.status), created, ended, labels, str(count))
    out.print(table)


async def _predecessor(store: SQLiteStore, run_id: str) -> str:
    """[K2] the predecessor lives only in the run's run_started record."""
    page = await store.list_run_records(run_id, limit=1)
    if not page.records or page.records[0].type != payloads.RUN_STARTED:
        return ""
    return payloads.RunStarted.decode(page.records[0].payload).predecessor_run_id


async def _runs(store: SQLiteStore, args: argparse.Namespace, out: Console) -> None:
    await store.load_session(args.session_id)
    runs = await store.list_runs_by_session(args.session_id)
    predecessors = {r.run_id: await _predecessor(store, r.run_id) for r in runs}
    if args.json:
        rows = [
            {**msgspec.structs.asdict(r), "predecessor_run_id": predecessors[r.run_id]}
            for r in runs
        ]
        print(_dump(rows))
        return
    table = _table("runs", "run", "agent", "status", "parent", "predecessor")
    for r in runs:
        table.row(r.run_id, r.agent_id, str(r.status), r.parent_run_id, predecessors[r.run_id])
    out.print(table)
    out.print(_tree(args.session_id, runs, predecessors))


def _tree(session_id: str, runs: list[RunMeta], predecessors: dict[str, str]) -> Tree:
    """Runs as a tree: children under their parent, a continuation under its predecessor."""
    tree = Tree(f"session {session_id}")
    nodes: dict[str, Tree] = {}
    for r in runs:  # start order: a parent or predecessor always comes first
        label = f"{r.run_id}  {r.agent_id}  [bold]{r.status}[/]"
        if r.cancellation_reason:
            label += f"  ({r.cancellation_reason})"
        if r.parent_run_id in nodes:
            nodes[r.run_id] = nodes[r.parent_run_id].add(f"child: {label}")
        elif predecessors.get(r.run_id) in nodes:
            nodes[r.run_id] = nodes[predecessors[r.run_id]].add(f"continued by: {label}")
        else:
            nodes[r.run_id] = tree.add(label)
    return tree


async def _all_records(store: SQLiteStore, run_id: str) -> list[Record]:
    records: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        records.extend(page.records)
        if not page.next_cursor:
            return records
        cursor = page.next_cursor


async def _records(store: SQLiteStore, args: argparse.Namespace, out: Console) -> None:
    records = await _all_records(store, args.run_id)
    if args.json:
        rows = [
            {**msgspec.structs.asdict(r), "payload": _payload(r), "timestamp": _when(r.timestamp)}
            for r in records
        ]
        print(_dump(rows))
        return
    table = _table(f"records of {args.run_id}", "id", "type", "event key", "time", "payload")
    for r in records:
        table.row(r.id, r.type, r.event_key, _when(r.timestamp), _short(r.payload.decode()))
    out.print(table)


async def _transcript(store: SQLiteStore, args: argparse.Namespace, out: Console) -> None:
    messages: list[Message] = await build_messages_from_run_log(store, args.run_id)
    if args.json:
        print(encode_messages(messages).decode())
        return
    table = _table(f"transcript of {args.run_id}", "#", "role", "content")
    for index, message in enumerate(messages):
        content = "\n".join(_short(_part(p), 100) for p in message.parts)
        table.row(str(index), message.role, content)
    out.print(table)


def _now() -> datetime:
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


async def _session(store: SQLiteStore, args: argparse.Namespace, out: Console) -> None:
    if args.action == "end":
        ended = await store.end_session(args.session_id, ended_at=_now())
        result: dict[str, Any] = msgspec.structs.asdict(ended)
        message = f"session {ended.id} ended at {_when(ended.ended_at)}"
    else:
        await store.purge_session(args.session_id)
        result = {"id": args.session_id, "purged": True}
        message = f"session {args.session_id} purged"
    print(_dump(result)) if args.json else out.print(message)


Command = Callable[[SQLiteStore, argparse.Namespace, Console], Awaitable[None]]
_COMMANDS: dict[str, Command] = {
    "sessions": _sessions,
    "runs": _runs,
    "records": _records,
    "transcript": _transcript,
    "session": _session,
}


async def _run(command: Command, path: str, args: argparse.Namespace) -> None:
    if args.store:
        from agentledger.service import StoreClient

        async with StoreClient(args.store) as client:
            await command(cast(Any, client), args, _console())
        return
    if not await asyncio.to_thread(os.path.exists, path):
        raise ValidationError(
            field="--db",
            expected="an existing agentledger database",
            got=path,
            message=f"no database at {path} (run `agentledger demo` first, or pass --db PATH)",
        )
    store = await SQLiteStore.open(path)
    try:
        await command(store, args, _console())
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    path = args.db or default_path()
    try:
        if args.command == "demo":
            from agentledger.demo import run_demo

            return run_demo(path)
        if args.command is None:
            parser.print_help()
            return 0
        if args.command in ("worker", "serve", "token"):
            return int(args.handler(args))
        asyncio.run(_run(_COMMANDS[args.command], path, args))
    except AgentledgerError as e:
        print(f"agentledger: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `agentledger records RUN | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0
