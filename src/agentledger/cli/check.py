"""``agentledger check``: every invariant of a store, and strict decoding of every record.

Two layers, both read-only:

* the backend's own audit, on its tables: for SQLite
  :func:`agentledger.storage.sqlite.check_invariants` (``integrity_check``,
  one final record per closed run, checkpoints only on suspended runs, ids
  1..N without gaps, lifecycle keys naming their records, no orphans, nothing
  left of a purged session), for PostgreSQL the same checks in
  :mod:`agentledger.storage.postgres.check`;
* through the ``Store`` protocol, for every run (every session's, and the
  one-shot runs the backend lists): its meta and records read back strictly,
  record ids 1..N owned by the run, each payload exactly one JSON value, each
  known record type decoding as its typed event, a closed run's lifecycle
  (one final record at the end, cancellation provenance [C1]-[C3], a valid
  transcript), a running run's transcript decoding, a suspended run's checkpoint.

A service URL gets the protocol layer only (its sessions' runs).

With ``--temporal HOST:PORT``, every run still running in the store, and every
run of the store whose workflow is still open, is also looked up on that
Temporal server: a run whose workflow task keeps failing (a bug in the run
loop) is paused, waiting for fixed code, and is a finding with its error
(:mod:`agentledger.engine.temporal.paused`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.temporal import PAUSED_HELP, finish, temporal_options

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.types import Record, RunMeta
    from agentledger.target import Target

__all__ = ["Audit", "audit", "check"]


@click.command(
    short_help="check every invariant and decode every stored record", epilog=PAUSED_HELP
)
@temporal_options(
    required=False,
    help="also ask this Temporal server about every running run and every run whose workflow "
    "is still open: a paused one is a finding",
)
@settings_options
def check(settings: Settings, temporal: str | None, namespace: str) -> int:
    """Check every invariant of the store and decode every stored record strictly.

    Prints each finding on a line (or, with --json, {"target", "sessions",
    "runs", "records", "findings", "ok"}) and exits 1 if there is any, 0 if none.
    With --temporal, each run paused on that server is a finding (and --json
    adds "paused": [{"run_id", "error", "attempts", "since"}]).
    """

    async def use(store: AdminStore) -> int:
        from agentledger.cli.output import echo, echo_json

        result = await audit(store, settings.target)
        paused: list[dict[str, object]] = []
        if temporal:
            from agentledger.cli.temporal import paused_runs

            found = await paused_runs(temporal, namespace, result.running, store=store)
            for run_id, pause in found.items():
                result.findings.append(
                    f"run {run_id!r} is paused: {pause.describe()}; deploy fixed code and "
                    "the run continues by itself"
                )
                paused.append(
                    {
                        "run_id": run_id,
                        "error": pause.error,
                        "attempts": pause.attempts,
                        "since": pause.since.isoformat(),
                    }
                )
        if settings.json:
            echo_json(
                {
                    "target": str(settings.target),
                    "sessions": result.sessions,
                    "runs": result.runs,
                    "records": result.records,
                    "findings": result.findings,
                    **({"paused": paused} if temporal else {}),
                    "ok": not result.findings,
                }
            )
        else:
            for finding in result.findings:
                echo(finding)
            verdict = f"{len(result.findings)} finding(s)" if result.findings else "no findings"
            echo(
                f"checked {result.sessions} session(s), {result.runs} run(s), "
                f"{result.records} record(s): {verdict}"
            )
        return 1 if result.findings else 0

    if temporal:
        finish(lambda: run(with_store(settings, use)), json=settings.json)
    return run(with_store(settings, use))


@dataclass
class Audit:
    """What :func:`audit` looked at and found."""

    sessions: int = 0
    runs: int = 0
    records: int = 0
    findings: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    """The runs still running in the store (those Temporal may hold paused)."""


async def _backend(target: Target) -> tuple[list[str], list[str]]:
    """The backend's own findings and every run id it holds (empty for a service)."""
    import asyncio

    kind = target.kind
    if kind == "sqlite":
        from agentledger.storage.sqlite.check import check_invariants, stored_run_ids

        path = target.path
        findings = await asyncio.to_thread(check_invariants, path)
        return findings, await asyncio.to_thread(stored_run_ids, path)
    if kind == "postgres":
        from agentledger.storage.postgres import check as postgres_check

        return (
            await postgres_check.check_invariants(target.text),
            await postgres_check.stored_run_ids(target.text),
        )
    return [], []


async def audit(store: AdminStore, target: Target) -> Audit:
    """Every finding about the store ``target`` names, opened as ``store``."""
    from agentledger.cli.sessions import list_all_sessions
    from agentledger.errors import CorruptRecordError

    result = Audit()
    result.findings, run_ids = await _backend(target)
    try:
        sessions, _ = await list_all_sessions(store)
    except CorruptRecordError as e:
        result.findings.append(f"sessions: {e}")
        sessions = []
    result.sessions = len(sessions)
    seen = set(run_ids)
    for session in sessions:
        try:
            metas = await store.list_runs_by_session(session.id)
        except CorruptRecordError as e:
            result.findings.append(f"session {session.id!r}: {e}")
            continue
        result.findings.extend(await _check_session_log(store, session.id))
        for meta in metas:
            if meta.run_id not in seen:
                seen.add(meta.run_id)
                run_ids.append(meta.run_id)
    for run_id in run_ids:
        result.runs += 1
        result.findings.extend(await _check_run(store, run_id, result))
    return result


async def _check_session_log(store: AdminStore, session_id: str) -> list[str]:
    """Page through a session's log: every record verified as a listing verifies it."""
    from agentledger.errors import (
        CorruptRecordError,
        NotFoundError,
        SessionKeyErasedError,
        SessionPurgedError,
    )

    cursor = ""
    try:
        while True:
            page = await store.list_session_run_records(session_id, cursor=cursor, limit=1000)
            if not page.next_cursor:
                return []
            cursor = page.next_cursor
    except CorruptRecordError as e:
        return [f"session {session_id!r}: {e}"]
    except (NotFoundError, SessionPurgedError):  # purged while the audit ran
        return []
    except SessionKeyErasedError:  # [A2] erased on purpose: unreadable is correct
        return []


async def _all_records(store: AdminStore, run_id: str) -> list[Record]:
    records: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        records.extend(page.records)
        if not page.next_cursor:
            return records
        cursor = page.next_cursor


async def _check_run(store: AdminStore, run_id: str, result: Audit) -> list[str]:
    from agentledger.errors import (
        AgentledgerError,
        CorruptRecordError,
        NotFoundError,
        SessionKeyErasedError,
        SessionPurgedError,
    )
    from agentledger.runtime.completion import check_lifecycle, run_transcript
    from agentledger.storage.types import RunStatus

    try:
        meta = await store.load_run(run_id)
        records = await _all_records(store, run_id)
    except CorruptRecordError as e:
        return [str(e)]
    except (NotFoundError, SessionPurgedError):  # purged while the audit ran
        result.runs -= 1
        return []
    except SessionKeyErasedError:  # [A2] erased on purpose: its records are unreadable
        return []
    result.records += len(records)
    if meta.status is RunStatus.RUNNING:
        result.running.append(run_id)
    findings = _check_records(meta, records)
    try:
        transcript = await run_transcript(store, run_id, records)  # follows its references
        if meta.status is not RunStatus.RUNNING:
            check_lifecycle(meta, records, transcript)
        if meta.status is RunStatus.SUSPENDED:
            await store.load_run_suspension(run_id)
    except AgentledgerError as e:
        findings.append(f"run {run_id!r}: {e}")
    return findings


def _check_records(meta: RunMeta, records: list[Record]) -> list[str]:
    """Ids, owners, JSON and typed payloads of one run's records."""
    import msgspec

    from agentledger.errors import CorruptRecordError
    from agentledger.runtime.events import event_from_record

    strict = msgspec.json.Decoder(float_hook=str)  # JSON syntax only; numbers stay text
    findings: list[str] = []
    owner = (meta.run_id, meta.agent_id, meta.session_id)
    for position, record in enumerate(records, start=1):
        where = f"record {record.id!r} of run {meta.run_id!r}"
        if record.id != str(position):
            findings.append(f"{where}: id {record.id!r} at position {position}")
        if (record.run_id, record.agent_id, record.session_id) != owner:
            findings.append(f"{where}: names another run, agent or session than its run")
        try:
            strict.decode(record.payload)
        except msgspec.DecodeError as e:
            findings.append(f"{where}: payload is not one JSON value ({e})")
            continue
        try:
            event_from_record(record)
        except CorruptRecordError as e:
            findings.append(str(e))
    return findings
