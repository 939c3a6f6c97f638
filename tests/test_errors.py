"""The error tree of DESIGN.md section 8, pinned: classes, parents and carried data."""

from __future__ import annotations

import pickle

import pytest

from agentledger import errors
from agentledger.errors import (
    AccessDeniedError,
    ActivityFailedError,
    AgentledgerError,
    ArchiveExistsError,
    ChildFailedError,
    ConflictError,
    ContractError,
    CorruptArchiveError,
    CorruptRecordError,
    NotFoundError,
    OverloadedError,
    ProviderError,
    RecordConflictError,
    RecordOwnerMismatchError,
    RegistrationClosedError,
    RunCancellationConflictError,
    RunConflictError,
    RunLoopError,
    RunNotActiveError,
    RunNotFoundError,
    RunSessionMismatchError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    SchemaVersionError,
    SessionActiveError,
    SessionBusyError,
    SessionConflictError,
    SessionEndedError,
    SessionHasActiveRunsError,
    SessionKeyErasedError,
    SessionNotFoundError,
    SessionPurgedError,
    StoreClosedError,
    SuspensionNotFoundError,
    TranscriptError,
    TransientError,
    ValidationError,
)

PARENTS: dict[type[Exception], type[Exception]] = {
    AgentledgerError: Exception,
    ContractError: AgentledgerError,
    TransientError: AgentledgerError,
    OverloadedError: TransientError,
    ProviderError: ContractError,
    ValidationError: ContractError,
    TranscriptError: ValidationError,
    SchemaVersionError: ValidationError,
    NotFoundError: ContractError,
    SessionNotFoundError: NotFoundError,
    RunNotFoundError: NotFoundError,
    SuspensionNotFoundError: NotFoundError,
    SessionEndedError: ContractError,
    SessionPurgedError: ContractError,
    SessionActiveError: ContractError,
    SessionHasActiveRunsError: ContractError,
    RunNotActiveError: ContractError,
    SessionBusyError: RunNotActiveError,
    RecordOwnerMismatchError: ContractError,
    RunSessionMismatchError: ContractError,
    ConflictError: ContractError,
    RecordConflictError: ConflictError,
    RunConflictError: ConflictError,
    RunCancellationConflictError: ConflictError,
    RunSuspensionConflictError: ConflictError,
    RunTerminalConflictError: ConflictError,
    SessionConflictError: ConflictError,
    CorruptRecordError: ContractError,
    SessionKeyErasedError: ContractError,
    CorruptArchiveError: CorruptRecordError,
    ArchiveExistsError: ContractError,
    RegistrationClosedError: ContractError,
    StoreClosedError: ContractError,
    RunLoopError: ContractError,
    ActivityFailedError: ContractError,
    ChildFailedError: ContractError,
    AccessDeniedError: ContractError,
}


def test_every_error_has_its_documented_parent() -> None:
    """Section 8: each class sits exactly where the tree says."""
    for cls, parent in PARENTS.items():
        assert cls.__bases__ == (parent,), cls


def test_the_tree_is_complete() -> None:
    """Section 8: the module exports the whole tree and nothing else."""
    assert set(errors.__all__) == {cls.__name__ for cls in PARENTS}


def test_contract_and_transient_are_disjoint() -> None:
    """Section 8: a permanent error is never retryable and the other way round."""
    for cls in PARENTS:
        assert not (issubclass(cls, ContractError) and issubclass(cls, TransientError)), cls


def test_every_error_is_permanent_or_transient() -> None:
    """Retry policies branch on ContractError and TransientError: no error sits beside them."""
    for cls in PARENTS:
        if cls is not AgentledgerError and issubclass(cls, AgentledgerError):
            assert issubclass(cls, ContractError | TransientError), cls


def test_the_engines_errors_are_permanent_and_their_cancel_is_private() -> None:
    """An engine's final failures are ContractErrors; its cancel signal is not an error of the
    tree (the run loop catches it; no caller sees it)."""
    from agentledger import engine
    from agentledger.engine.base import WorkflowCanceled

    for cls in (ActivityFailedError, ChildFailedError, RunLoopError):
        assert issubclass(cls, ContractError), cls
    assert not hasattr(errors, "WorkflowCanceled")
    assert "WorkflowCanceled" not in engine.__all__
    assert not issubclass(WorkflowCanceled, AgentledgerError)
    failed = ActivityFailedError(
        activity="plan_turn", error_type="KeyError", reason="'x'", retryable=False, attempts=1
    )
    assert failed.reason == "'x'"
    assert str(failed) == "activity plan_turn failed after 1 attempt(s): 'x'"
    child = ChildFailedError(workflow_id="r2", reason="boom", error=None)
    assert (child.reason, str(child)) == ("boom", "child workflow r2 failed: boom")


SAMPLES: list[AgentledgerError] = [
    ValidationError(field="record.timestamp", expected="millisecond precision", got=1),
    TranscriptError(
        field="tool_use_ids",
        expected="one result per call",
        message_index=3,
        part_index=1,
        tool_use_ids=["t1"],
    ),
    SchemaVersionError(current=12, latest=15),
    SchemaVersionError(current=16, latest=15, where="ledger.db: "),
    SessionNotFoundError(session_id="s1"),
    RunNotFoundError(run_id="r1"),
    SuspensionNotFoundError(run_id="r1"),
    SessionEndedError(session_id="s1"),
    SessionPurgedError(session_id="s1", run_id="r1"),
    SessionActiveError(session_id="s1"),
    SessionHasActiveRunsError(session_id="s1", run_ids=["r1", "r2"]),
    RunNotActiveError(run_id="r1", expected="running", got="completed"),
    SessionBusyError(session_id="s1", run_id="r1", message_run_id="r2"),
    RecordOwnerMismatchError(run_id="r1", field="agent_id", expected="a", got="b"),
    RunSessionMismatchError(run_id="r1", expected="s1", got="s2"),
    RunTerminalConflictError(run_id="r1", field="status", expected="completed", got="failed"),
    SessionConflictError(session_id="s1", field="labels", expected={"a": "1"}, got={}),
    CorruptRecordError(run_id="r1", record_id="3", reason="unknown field"),
    SessionKeyErasedError(session_id="s1", run_id="r1"),
    SessionKeyErasedError(session_id="", run_id="r1"),
    CorruptArchiveError(path="/a/s1.alarchive", reason="checksum mismatch"),
    ArchiveExistsError(path="/a/s1.alarchive", session_id="s1", reason="another digest"),
    RegistrationClosedError(name="chat"),
    StoreClosedError(backend="sqlite", operation="load_run"),
    RunLoopError(run_id="r1", error_type="KeyError", reason="'x'"),
    ActivityFailedError(
        activity="begin_run", error_type="ValueError", reason="x", retryable=False, attempts=1
    ),
    ChildFailedError(workflow_id="r1", reason="boom", error=None),
    AccessDeniedError(operation="end_session", status=403, reason="role worker"),
    TransientError("database is locked", operation="append_run_record"),
    OverloadedError("512 calls being served", operation="append_run_record", retry_after=1.0),
    ProviderError(provider="openai", status=400, body="bad request"),
]


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_errors_carry_their_data_and_survive_pickling(error: AgentledgerError) -> None:
    """Section 8: errors carry ids and fields, also across process boundaries."""
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error)
    assert clone.__dict__ == error.__dict__
    assert str(clone) == str(error)


def test_messages_name_the_data() -> None:
    """Section 8: the message says which run, which field, expected vs got."""
    conflict = RunCancellationConflictError(
        run_id="r9", field="cancellation_reason", expected="user", got="timeout"
    )
    assert (conflict.run_id, conflict.field, conflict.expected, conflict.got) == (
        "r9",
        "cancellation_reason",
        "user",
        "timeout",
    )
    assert "r9" in str(conflict)
    assert "'user'" in str(conflict)
    assert "'timeout'" in str(conflict)
    busy = SessionHasActiveRunsError(session_id="s", run_ids=["a", "b"])
    assert busy.run_ids == ("a", "b")
    assert "a, b" in str(busy)
    located = TranscriptError(field="kind", expected="a known kind", message_index=2, part_index=0)
    assert str(located).startswith("messages[2].parts[0]: ")
    assert isinstance(RunNotFoundError(run_id="x"), NotFoundError)
    assert RunNotFoundError(run_id="x").kind == "run"
    session = SessionConflictError(
        session_id="s7", field="labels", expected={"tenant": "acme"}, got={"tenant": "other"}
    )
    assert (session.session_id, session.run_id, session.field) == ("s7", "", "labels")
    assert (session.expected, session.got) == ({"tenant": "acme"}, {"tenant": "other"})
    assert "session 's7'" in str(session)
    assert "'acme'" in str(session)
    assert "'other'" in str(session)
    archive = CorruptArchiveError(path="/a/s1.alarchive", reason="truncated")
    assert (archive.path, archive.reason, archive.run_id, archive.record_id) == (
        "/a/s1.alarchive",
        "truncated",
        "",
        "",
    )
    assert str(archive) == "archive /a/s1.alarchive: truncated"
    exists = ArchiveExistsError(path="/a/s1.alarchive", session_id="s1", reason="other digest")
    assert (exists.session_id, exists.reason) == ("s1", "other digest")
    assert "'s1'" in str(exists)


def test_a_schema_version_error_says_what_to_do() -> None:
    """Behind: how many migrations are pending; newer: upgrade, never migrate."""
    behind = SchemaVersionError(current=12, latest=15, where="ledger.db: ", advice="; migrate it")
    assert (behind.field, behind.got, behind.pending, behind.newer) == (
        "schema_version",
        12,
        (13, 14, 15),
        False,
    )
    assert str(behind) == (
        "ledger.db: 3 migrations pending (schema version 12, this agentledger's is 15); migrate it"
    )
    newer = SchemaVersionError(current=16, latest=15, advice="; migrate it")
    assert (newer.got, newer.pending, newer.newer) == (16, (), True)
    assert str(newer) == (
        "this database was written by a newer agentledger (schema 16, this one knows 15); "
        "upgrade agentledger"
    )
