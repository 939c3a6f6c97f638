"""``agentledger runs SESSION_ID``: a session's runs as a tree (children, continuations).

A run suspended because one planner turn or tool call kept dying shows as
``suspended (crash_loop: ACTIVITY started N times)``.

With ``--temporal HOST:PORT`` a running run paused on that server (its
workflow task keeps failing: a bug in the run loop) shows as ``running
(paused: ERROR ...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import session_ids
from agentledger.cli.temporal import PAUSED_HELP, finish, temporal_options

if TYPE_CHECKING:
    from agentledger.engine.temporal.paused import Pause
    from agentledger.runtime.checkpoint import CrashLoop
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.run_failure import RunFailure
    from agentledger.storage.types import RunMeta, SessionMessage
    from agentledger.views.runs import HistorySource

__all__ = ["predecessor", "run_tree", "runs"]


@click.command(short_help="a session's runs, as a tree", epilog=PAUSED_HELP)
@click.argument("session_id", shell_complete=session_ids)
@temporal_options(
    required=False,
    help="the Temporal server running the runs: a running run paused there shows as "
    "'running (paused: ERROR)'",
)
@settings_options
def runs(settings: Settings, session_id: str, temporal: str | None, namespace: str) -> None:
    """SESSION_ID's runs in start order, as a tree: a child run under its parent, a
    continuation under the suspended run it resumed. A run whose history is an
    earlier run's transcript says which (the turn it follows, or the run and
    record it forks). A failed run says why (its error's kind and message, from
    its last record), a canceled one the reason given. Under a run, each tool call
    whose effect is not 'retry' shows it, and a call in doubt says so, with the
    answer it got and who gave it. A run suspended because a planner turn or tool
    call kept killing its worker says so: 'suspended (crash_loop: ACTIVITY started
    N times)'. A run started for a message sent while the session was busy says
    what happened to the message (queued, interrupted a run, steered into one
    that ended first); a run that took a steering message at a planner turn
    lists it ('took message #N RUN (steered)'); messages still waiting are
    listed last."""
    if temporal:
        server = (temporal, namespace)

        def body() -> int:
            run(with_store(settings, lambda store: _runs(store, settings, session_id, server)))
            return 0

        finish(body, json=settings.json)
    run(with_store(settings, lambda store: _runs(store, settings, session_id)))


async def predecessor(store: AdminStore, run_id: str) -> str:
    """[K2] the run a continuation resumed: it is kept only in its ``run_started`` record."""
    from agentledger.views.runs import read_run_start

    return (await read_run_start(store, run_id)).predecessor


def _history_json(source: HistorySource | None) -> dict[str, str] | None:
    """The history reference a run started from (its kind, source run and last record);
    None for a run seeded by copy or not at all."""
    if source is None:
        return None
    return {"kind": source.kind, "run_id": source.run_id, "through": source.through}


async def _runs(
    store: AdminStore,
    settings: Settings,
    session_id: str,
    temporal: tuple[str, str] | None = None,
) -> None:
    from agentledger.cli.output import echo, echo_json, jsonable, when
    from agentledger.cli.tool_notes import call_notes
    from agentledger.runtime.crash_loops import load_crash_loops
    from agentledger.storage.message_fate import describe_waiting, message_json, steered_into
    from agentledger.storage.run_failure import load_run_failures
    from agentledger.views.runs import read_run_start

    found = await store.load_session(session_id)
    metas = await store.list_runs_by_session(session_id)
    messages = {m.run_id: m for m in await store.list_session_messages(session_id)}
    starts = {r.run_id: await read_run_start(store, r.run_id) for r in metas}
    predecessors = {run_id: start.predecessor for run_id, start in starts.items()}
    histories = {run_id: _history_json(start.history) for run_id, start in starts.items()}
    failures = await load_run_failures(store, metas)
    looped = await load_crash_loops(store, metas)
    notes = {r.run_id: await call_notes(store, r.run_id) for r in metas}
    pauses: dict[str, Pause] = {}
    if temporal is not None:
        from agentledger.cli.temporal import paused_runs

        pauses = await paused_runs(*temporal, [r.run_id for r in metas])
    if settings.json:
        rows = [
            {
                **jsonable(r),
                "predecessor_run_id": predecessors[r.run_id],
                "history": histories[r.run_id],
                "failure": jsonable(failures.get(r.run_id)),
                **({"tool_calls": notes[r.run_id]} if notes[r.run_id] else {}),
                **({"paused": _pause_json(pauses[r.run_id])} if r.run_id in pauses else {}),
                **({"crash_loop": _loop_json(looped[r.run_id])} if r.run_id in looped else {}),
                **({"message": message_json(messages[r.run_id])} if r.run_id in messages else {}),
                **(
                    {"steered": [message_json(m) for m in took]}
                    if (took := steered_into(messages.values(), r.run_id))
                    else {}
                ),
            }
            for r in metas
        ]
        waiting = [message_json(m) for m in messages.values() if not m.started]
        echo_json({"session": found, "runs": rows, "waiting": waiting})
        return
    echo(f"session {found.id}  {found.status}  created {when(found.created_at)}")
    for line in run_tree(metas, predecessors, histories, pauses, failures, notes, looped, messages):
        echo(line)
    for m in messages.values():
        if not m.started:
            echo(f"waiting: {m.run_id}  {describe_waiting(m)}")


def _loop_json(loop: CrashLoop) -> dict[str, object]:
    return {"activity": loop.activity, "attempts": loop.attempts}


def _pause_json(pause: Pause) -> dict[str, object]:
    return {"error": pause.error, "attempts": pause.attempts, "since": pause.since.isoformat()}


def run_tree(
    metas: list[RunMeta],
    predecessors: dict[str, str],
    histories: dict[str, dict[str, str] | None] | None = None,
    pauses: dict[str, Pause] | None = None,
    failures: dict[str, RunFailure] | None = None,
    notes: dict[str, dict[str, list[str]]] | None = None,
    looped: dict[str, CrashLoop] | None = None,
    messages: dict[str, SessionMessage] | None = None,
) -> list[str]:
    """Tree lines: children under their parent, a continuation under its predecessor;
    a paused run's status says why it waits (and so does one a crash loop suspended),
    a failed or canceled one why it ended;
    ``notes`` (run id -> tool call id -> notes) go under their run, and a run started
    for a message sent while the session was busy says the message's fate."""
    from agentledger.cli.output import when
    from agentledger.runtime.crash_loops import describe_crash_loop
    from agentledger.storage.message_fate import describe_message, steered_into

    kids: dict[str, list[tuple[str, RunMeta]]] = {"": []}
    known = {r.run_id for r in metas}
    for r in metas:  # start order: a parent or predecessor always comes first
        if r.parent_run_id in known:
            kids.setdefault(r.parent_run_id, []).append(("child: ", r))
        elif predecessors.get(r.run_id, "") in known:
            kids.setdefault(predecessors[r.run_id], []).append(("continued by: ", r))
        else:
            kids[""].append(("", r))
    lines: list[str] = []

    def walk(parent: str, indent: str) -> None:
        entries = kids.get(parent, [])
        for index, (how, r) in enumerate(entries):
            last = index == len(entries) - 1
            failure = (failures or {}).get(r.run_id)
            reason = f"  ({r.cancellation_reason})" if r.cancellation_reason else ""
            reason += f"  ({failure})" if failure is not None else ""
            pause = (pauses or {}).get(r.run_id)
            status = f"{r.status} (paused: {pause.describe()})" if pause else str(r.status)
            loop = (looped or {}).get(r.run_id)
            if loop is not None:
                status = f"{r.status} (crash_loop: {describe_crash_loop(loop)})"
            source = (histories or {}).get(r.run_id)
            follows = ""
            if source is not None and source["kind"] == "next_turn":
                follows = f"  follows {source['run_id']}"
            elif source is not None and source["kind"] == "fork":
                follows = f"  fork of {source['run_id']} at record {source['through']}"
            message = (messages or {}).get(r.run_id)
            if message is not None:
                follows += f"  {describe_message(message)}"
            lines.append(
                f"{indent}{'└── ' if last else '├── '}{how}{r.run_id}  {r.agent_id}  "
                f"{status}{reason}  started {when(r.started_at)}{follows}"
            )
            below = indent + ("    " if last else "│   ")
            for call_id, said in (notes or {}).get(r.run_id, {}).items():
                lines.append(f"{below}  call {call_id}: {'; '.join(said)}")
            for m in steered_into((messages or {}).values(), r.run_id):
                lines.append(f"{below}  took message #{m.position} {m.run_id} (steered)")
            walk(r.run_id, below)

    walk("", "")
    return lines
