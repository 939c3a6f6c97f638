"""State reads every plan shares, and how a missing or damaged lifecycle record is reported."""

from __future__ import annotations

from agentledger.errors import (
    CorruptRecordError,
    RunNotFoundError,
    SessionNotFoundError,
    SessionPurgedError,
    SuspensionNotFoundError,
)
from agentledger.storage.state import RunRow, SessionRow, StateReader
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunMeta,
    RunStart,
    RunStatus,
    Session,
    SessionStatus,
)
from agentledger.storage.validation import (
    COMPARED_FIELDS,
    require_id,
)

TERMINAL_STATUSES = {
    RunStatus.COMPLETED: ("success", "completed"),
    RunStatus.FAILED: ("failed", "failed"),
    RunStatus.CANCELED: ("canceled", "canceled"),
}


def require_session(reader: StateReader, session_id: str) -> SessionRow:
    """The stored session, or the error that says why there is none."""
    require_id("session_id", session_id)
    session = reader.session(session_id)
    if session is not None:
        return session
    if reader.session_purged(session_id):
        raise SessionPurgedError(session_id=session_id)
    raise SessionNotFoundError(session_id=session_id)


def require_run(reader: StateReader, run_id: str, field: str = "run_id") -> RunRow:
    """The stored run, or RunNotFoundError / SessionPurgedError."""
    require_id(field, run_id)
    run = reader.run(run_id)
    if run is not None:
        return run
    purged = reader.purged_run_session(run_id)
    if purged is not None:
        raise SessionPurgedError(session_id=purged, run_id=run_id)
    raise RunNotFoundError(run_id=run_id)


def load_session(reader: StateReader, session_id: str) -> Session:
    """``SessionAdmin.load_session``."""
    return require_session(reader, session_id).public()


def load_session_status(reader: StateReader, session_id: str) -> SessionStatus:
    """``Store.load_session_status``."""
    return require_session(reader, session_id).status


def load_run(reader: StateReader, run_id: str) -> RunMeta:
    """``Store.load_run``."""
    return require_run(reader, run_id).meta()


def load_run_suspension(reader: StateReader, run_id: str) -> Checkpoint:
    """``Store.load_run_suspension``: the checkpoint of a suspended run."""
    run = require_run(reader, run_id)
    if run.checkpoint is None:
        raise SuspensionNotFoundError(run_id=run_id)
    return run.checkpoint


def run_session_status(reader: StateReader, run: RunRow | RunStart) -> SessionStatus | None:
    if not run.session_id:
        return None
    session = reader.session(run.session_id)
    if session is None:  # a run never outlives its session: purge removes both
        raise CorruptRecordError(
            run_id=run.run_id, record_id="", reason=f"session {run.session_id!r} is missing"
        )
    return session.status


def stored_record(reader: StateReader, run: RunRow, key: str, what: str) -> Record:
    """A lifecycle record the run row points at; its absence is corruption."""
    record = reader.record(run.run_id, key)
    if record is None:
        raise_if_damaged(reader, run, key, what)
        raise CorruptRecordError(
            run_id=run.run_id, record_id="", reason=f"{what} record {key!r} is missing"
        )
    return record


def raise_if_damaged(
    reader: StateReader, run: RunRow, key: str, what: str, given: Record | None = None
) -> None:
    """[J1] a record looked up by ``key`` is absent: if the run's log holds a damaged
    record, report it (the one most like ``given``, else of type ``what``) instead of
    refusing as if nothing were stored. Runs only on refusal paths.

    Raises:
        CorruptRecordError: naming the run, the damaged record and the fields in
            which it differs from what was looked for.
    """
    damaged = reader.damaged_records(run.run_id)
    if not damaged:
        return
    sought: dict[str, object] = {"type": what, "event_key": key}
    if given is not None:
        sought = {name: getattr(given, name) for name in COMPARED_FIELDS}

    def differences(record: Record) -> list[str]:
        return [name for name, value in sought.items() if getattr(record, name) != value]

    found = min(damaged, key=lambda record: len(differences(record)))
    fields = [
        name if name == "payload" else f"{name} {getattr(found, name)!r}, not {sought[name]!r}"
        for name in differences(found)
    ]
    differ = f"; it differs from it in {'; '.join(fields)}" if fields else ""
    raise CorruptRecordError(
        run_id=run.run_id,
        record_id=found.id,
        reason=(
            "checksum mismatch: the stored record is not the bytes that were written; "
            f"the {what} {key!r} is not on the log{differ}"
        ),
    )
