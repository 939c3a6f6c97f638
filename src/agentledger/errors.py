"""The one error tree of agentledger.

Every error carries the ids and fields a caller needs to act on it, as
keyword-only attributes; the message is derived from them.

    AgentledgerError
    ├── ContractError                   permanent: retrying cannot change the answer
    │   ├── ValidationError             (field, expected, got)
    │   │   ├── TranscriptError         (+ message_index, part_index, tool_use_ids)
    │   │   └── SchemaVersionError      (+ current, latest, pending) not this code's schema
    │   ├── NotFoundError               (kind, id)
    │   │   ├── SessionNotFoundError
    │   │   ├── RunNotFoundError
    │   │   └── SuspensionNotFoundError
    │   ├── SessionEndedError           (session_id)
    │   ├── SessionPurgedError          (session_id, run_id)
    │   ├── SessionActiveError          (session_id)
    │   ├── SessionHasActiveRunsError   (session_id, run_ids)
    │   ├── RunNotActiveError           (run_id, expected, got)
    │   │   └── SessionBusyError        (+ session_id, message_run_id)
    │   ├── RecordOwnerMismatchError    (run_id, field, expected, got)
    │   ├── RunSessionMismatchError     (run_id, expected, got)
    │   ├── ConflictError               (run_id, field, expected, got)
    │   │   ├── RecordConflictError
    │   │   ├── RunConflictError
    │   │   ├── RunCancellationConflictError
    │   │   ├── RunSuspensionConflictError
    │   │   ├── RunTerminalConflictError
    │   │   └── SessionConflictError    (+ session_id; run_id is "")
    │   ├── CorruptRecordError          (run_id, record_id, reason)
    │   │   └── CorruptArchiveError     (path, reason; run_id and record_id are "")
    │   ├── ArchiveExistsError          (path, session_id, reason)
    │   ├── SessionKeyErasedError       (session_id, run_id) its data key was destroyed [A2]
    │   ├── RegistrationClosedError     (name)
    │   ├── StoreClosedError            (backend, operation) the store was closed before the call
    │   ├── AccessDeniedError           (operation, status, reason) the store service refused
    │   ├── ProviderError               (provider, status, body) a model provider refused
    │   ├── ActivityFailedError         (activity, error_type, reason, retryable, attempts, error)
    │   ├── ChildFailedError            (workflow_id, reason, error) a child run's workflow raised
    │   └── RunLoopError                (run_id, error_type, reason) a bug in the run loop
    └── TransientError                  database or network trouble; may be retried
        └── OverloadedError             (operation, reason, retry_after) the service shed the call

Code that retries branches on the first two: a :class:`TransientError` may succeed
later, a :class:`ContractError` never will. The engine's three (``ActivityFailedError``,
``ChildFailedError``, ``RunLoopError``) are permanent: what retrying there was, the engine
did before raising them (each class says how).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AccessDeniedError",
    "ActivityFailedError",
    "AgentledgerError",
    "ArchiveExistsError",
    "ChildFailedError",
    "ConflictError",
    "ContractError",
    "CorruptArchiveError",
    "CorruptRecordError",
    "NotFoundError",
    "OverloadedError",
    "ProviderError",
    "RecordConflictError",
    "RecordOwnerMismatchError",
    "RegistrationClosedError",
    "RunCancellationConflictError",
    "RunConflictError",
    "RunLoopError",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunSessionMismatchError",
    "RunSuspensionConflictError",
    "RunTerminalConflictError",
    "SchemaVersionError",
    "SessionActiveError",
    "SessionBusyError",
    "SessionConflictError",
    "SessionEndedError",
    "SessionHasActiveRunsError",
    "SessionKeyErasedError",
    "SessionNotFoundError",
    "SessionPurgedError",
    "StoreClosedError",
    "SuspensionNotFoundError",
    "TranscriptError",
    "TransientError",
    "ValidationError",
]


def _show(value: object) -> str:
    """Render a value for an error message, shortened so messages stay one line."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class AgentledgerError(Exception):
    """Root of every error agentledger raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only constructors do not survive the default pickling used
        # by multiprocessing; rebuild from the instance dict instead.
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls: type[AgentledgerError], state: dict[str, object]) -> AgentledgerError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


class ContractError(AgentledgerError):
    """A permanent refusal: the same call will get the same answer, so never retry it."""


class TransientError(AgentledgerError):
    """Database or network trouble; the same call may succeed later.

    Attributes:
        operation: what was being done (e.g. ``"start_root_run"``).
    """

    def __init__(self, message: str, *, operation: str = "") -> None:
        super().__init__(f"{operation}: {message}" if operation else message)
        self.operation = operation


class OverloadedError(TransientError):
    """The store service is taking more than it can serve and refused the call before doing
    any of it (HTTP 503 with ``Retry-After``); the same call may be sent again after
    ``retry_after`` seconds. ``StoreClient`` does so itself before raising it.

    Attributes:
        operation: the call that was refused.
        reason: which of the service's limits was reached.
        retry_after: seconds the service asks the caller to wait before sending it again.
    """

    def __init__(self, reason: str, *, operation: str = "", retry_after: float = 1.0) -> None:
        super().__init__(
            f"the service is overloaded ({reason}); send it again in {retry_after:g} s",
            operation=operation,
        )
        self.reason = reason
        self.retry_after = retry_after


class ProviderError(ContractError):
    """A model provider refused a request with a non-retryable status.

    Permanent: the provider answers the same request the same way (a throttle, a
    timeout or a 5xx is a :class:`TransientError` instead).

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, ``"bedrock"`` ...
        status: the HTTP status (0 when there was none).
        body: the provider's response body, as text.
    """

    def __init__(self, *, provider: str, status: int, body: str) -> None:
        super().__init__(f"{provider} returned {status}: {body[:500]}")
        self.provider = provider
        self.status = status
        self.body = body


class ValidationError(ContractError):
    """An input is malformed: ``field`` should have been ``expected`` but was ``got``.

    ``field`` is a dotted path into the input (``"record.timestamp"``) or a
    JSON path (``"$.parts[0].kind"``).
    """

    def __init__(self, *, field: str, expected: str, got: object = None, message: str = "") -> None:
        super().__init__(message or f"invalid {field}: expected {expected}, got {_show(got)}")
        self.field = field
        self.expected = expected
        self.got = got


class TranscriptError(ValidationError):
    """A transcript is malformed or cannot be used where it was sent.

    Attributes:
        message_index: index of the offending message, when one is to blame.
        part_index: index of the offending part inside that message.
        tool_use_ids: the tool-use ids involved (missing, extra or duplicated).
    """

    def __init__(
        self,
        *,
        field: str,
        expected: str,
        got: object = None,
        message: str = "",
        message_index: int | None = None,
        part_index: int | None = None,
        tool_use_ids: Sequence[str] = (),
    ) -> None:
        where = ""
        if message_index is not None:
            where = f"messages[{message_index}]"
            if part_index is not None:
                where += f".parts[{part_index}]"
            where += ": "
        text = message or f"invalid {field}: expected {expected}, got {_show(got)}"
        super().__init__(field=field, expected=expected, got=got, message=where + text)
        self.message_index = message_index
        self.part_index = part_index
        self.tool_use_ids = tuple(tool_use_ids)


class SchemaVersionError(ValidationError):
    """The database's schema version is not the one this agentledger reads and writes.

    Older (``current < latest``): migrations are pending; a writer (``agentledger
    migrate``, ``serve``, a worker, ``SQLiteStore.open``) applies them. Newer
    (``current > latest``): a newer agentledger wrote it; this one cannot use it
    and never migrates it, so upgrade agentledger. Either way nothing was written.
    ``field`` is ``"schema_version"`` and ``got`` is ``current``.

    Attributes:
        current: the database's schema version (0: none yet; for a newer
            database, the newest version it recorded).
        latest: this agentledger's schema version.
        pending: the versions of the migrations it still needs, in order (none
            for a newer database).
    """

    def __init__(
        self,
        *,
        current: int,
        latest: int,
        pending: Sequence[int] | None = None,
        where: str = "",
        advice: str = "",
    ) -> None:
        # ``where`` leads the message (the database, as the caller names it); ``advice``
        # ends an older database's (how to migrate it from where the caller stands).
        if current > latest:
            versions: tuple[int, ...] = ()
            message = (
                f"{where}this database was written by a newer agentledger (schema {current}, "
                f"this one knows {latest}); upgrade agentledger"
            )
        else:
            versions = tuple(range(current + 1, latest + 1) if pending is None else pending)
            count = len(versions)
            message = (
                f"{where}{count} migration{'s' if count > 1 else ''} pending (schema version "
                f"{current}, this agentledger's is {latest}){advice}"
            )
        super().__init__(
            field="schema_version",
            expected=f"schema version {latest}",
            got=current,
            message=message,
        )
        self.current = current
        self.latest = latest
        self.pending = versions

    @property
    def newer(self) -> bool:
        """Whether a newer agentledger wrote the database (upgrade, do not migrate)."""
        return self.current > self.latest


class NotFoundError(ContractError):
    """Nothing of this ``kind`` (``"session"``, ``"run"``, ``"suspension"``) has this ``id``."""

    def __init__(self, *, kind: str, id: str) -> None:
        super().__init__(f"{kind} {id!r} not found")
        self.kind = kind
        self.id = id


class SessionNotFoundError(NotFoundError):
    """No session has this id."""

    def __init__(self, *, session_id: str) -> None:
        super().__init__(kind="session", id=session_id)
        self.session_id = session_id


class RunNotFoundError(NotFoundError):
    """No run has this id."""

    def __init__(self, *, run_id: str) -> None:
        super().__init__(kind="run", id=run_id)
        self.run_id = run_id


class SuspensionNotFoundError(NotFoundError):
    """The run exists but holds no checkpoint (it was never suspended)."""

    def __init__(self, *, run_id: str) -> None:
        super().__init__(kind="suspension", id=run_id)
        self.run_id = run_id


class SessionEndedError(ContractError):
    """The session has ended; it accepts no new work and cannot be re-created."""

    def __init__(self, *, session_id: str) -> None:
        super().__init__(f"session {session_id!r} has ended")
        self.session_id = session_id


class SessionPurgedError(ContractError):
    """The session was purged; its id (and its runs' ids) can never be used again.

    ``run_id`` is set when the call named a run of the purged session.
    """

    def __init__(self, *, session_id: str, run_id: str = "") -> None:
        subject = f"run {run_id!r} of purged session" if run_id else "purged session"
        super().__init__(f"{subject} {session_id!r}: the id cannot be used again")
        self.session_id = session_id
        self.run_id = run_id


class SessionActiveError(ContractError):
    """The operation needs an ended session (purge), but the session is still active."""

    def __init__(self, *, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is still active; end it first")
        self.session_id = session_id


class SessionHasActiveRunsError(ContractError):
    """The session still has running runs, listed in ``run_ids``."""

    def __init__(self, *, session_id: str, run_ids: Sequence[str]) -> None:
        ids = tuple(run_ids)
        super().__init__(f"session {session_id!r} still has running runs: {', '.join(ids)}")
        self.session_id = session_id
        self.run_ids = ids


class RunNotActiveError(ContractError):
    """The run's status does not allow this change (``expected`` vs ``got``)."""

    def __init__(self, *, run_id: str, expected: str, got: str) -> None:
        super().__init__(f"run {run_id!r} is {got}, expected {expected}")
        self.run_id = run_id
        self.expected = expected
        self.got = got


class SessionBusyError(RunNotActiveError):
    """A message arrived while the session's latest turn ``run_id`` is still running
    (or messages wait ahead of it), and its policy is ``reject``: nothing was stored.

    ``message_run_id`` is the run id the refused message would have started.
    """

    def __init__(self, *, session_id: str, run_id: str, message_run_id: str = "") -> None:
        ContractError.__init__(
            self,
            f"session {session_id!r} is busy: its turn {run_id!r} is still running "
            "(send the message with if_busy='queue', 'interrupt' or 'steer', or wait)",
        )
        self.session_id = session_id
        self.run_id = run_id
        self.message_run_id = message_run_id
        self.expected = "ended"
        self.got = "running"


class RecordOwnerMismatchError(ContractError):
    """A record names another agent or session than the run it is written to."""

    def __init__(self, *, run_id: str, field: str, expected: str, got: str) -> None:
        super().__init__(
            f"record for run {run_id!r} has {field} {got!r}, but the run has {expected!r}"
        )
        self.run_id = run_id
        self.field = field
        self.expected = expected
        self.got = got


class RunSessionMismatchError(ContractError):
    """A related run (parent, predecessor) lives in another session than this run."""

    def __init__(self, *, run_id: str, expected: str, got: str) -> None:
        super().__init__(f"run {run_id!r} is in session {got!r}, expected {expected!r}")
        self.run_id = run_id
        self.expected = expected
        self.got = got


class ConflictError(ContractError):
    """A write disagrees with what the first write fixed; nothing was overwritten.

    ``field`` names the value that differs, ``expected`` is the stored value and
    ``got`` the one in this call.
    """

    def __init__(self, *, run_id: str, field: str, expected: object, got: object) -> None:
        super().__init__(
            f"{type(self).__name__} on run {run_id!r}: {field} is {_show(expected)} "
            f"in the store, got {_show(got)}"
        )
        self.run_id = run_id
        self.field = field
        self.expected = expected
        self.got = got


class RecordConflictError(ConflictError):
    """A record with this event key exists with different content."""


class RunConflictError(ConflictError):
    """A start (or continuation) differs from the run the first start created."""


class RunCancellationConflictError(ConflictError):
    """The run already has a different cancellation reason or intent record."""


class RunSuspensionConflictError(ConflictError):
    """The run was already suspended with another checkpoint or record."""


class RunTerminalConflictError(ConflictError):
    """The run already ended with another status or completion record."""


class SessionConflictError(ConflictError):
    """A ``create_session`` retry differs from the session the first create stored [D6].

    ``session_id`` names the session; ``run_id`` is ``""`` (no run is involved),
    so code that handles every :class:`ConflictError` alike still works.
    """

    def __init__(self, *, session_id: str, field: str, expected: object, got: object) -> None:
        ContractError.__init__(
            self,
            f"SessionConflictError on session {session_id!r}: {field} is {_show(expected)} "
            f"in the store, got {_show(got)}",
        )
        self.session_id = session_id
        self.run_id = ""
        self.field = field
        self.expected = expected
        self.got = got


class CorruptRecordError(ContractError):
    """Stored data does not fit its contract; it is reported, never skipped."""

    def __init__(self, *, run_id: str, record_id: str, reason: str) -> None:
        super().__init__(f"corrupt record {record_id!r} of run {run_id!r}: {reason}")
        self.run_id = run_id
        self.record_id = record_id
        self.reason = reason


class SessionKeyErasedError(ContractError):
    """The session's data key was destroyed (crypto-erasure [A2]): its sealed data is unreadable.

    Attributes:
        session_id: the erased session ("" for a one-shot run, which has its own key).
        run_id: the run whose record or checkpoint was asked for ("" if none).
    """

    def __init__(self, *, session_id: str, run_id: str = "") -> None:
        owner = f"session {session_id!r}" if session_id else f"one-shot run {run_id!r}"
        where = f" (run {run_id!r})" if session_id and run_id else ""
        super().__init__(f"the data key of {owner} was erased{where}: its records are unreadable")
        self.session_id = session_id
        self.run_id = run_id


class CorruptArchiveError(CorruptRecordError):
    """An archive file is damaged, truncated, tampered with or of an unknown format [A1].

    Nothing was read from it into a store. ``run_id`` and ``record_id`` are
    ``""``, so code that handles every :class:`CorruptRecordError` alike still works.
    """

    def __init__(self, *, path: str, reason: str) -> None:
        ContractError.__init__(self, f"archive {path}: {reason}")
        self.path = path
        self.run_id = ""
        self.record_id = ""
        self.reason = reason


class ArchiveExistsError(ContractError):
    """A file already holds the archive's name and is not this session's same archive [A1].

    It was left as it was: a matching archive is reused, anything else is refused.
    """

    def __init__(self, *, path: str, session_id: str, reason: str) -> None:
        super().__init__(f"archive {path} of session {session_id!r} exists and differs: {reason}")
        self.path = path
        self.session_id = session_id
        self.reason = reason


class RegistrationClosedError(ContractError):
    """Agents, toolsets and models can only be registered before the first run."""

    def __init__(self, *, name: str) -> None:
        super().__init__(f"cannot register {name!r}: registration closed at the first run")
        self.name = name


class AccessDeniedError(ContractError):
    """The store service refused the caller [S4]; nothing was read or written.

    Attributes:
        operation: the method that was called (``"end_session"``).
        status: 401 (no or unknown token) or 403 (role or label scope does not allow it).
        reason: what was missing, in words.
    """

    def __init__(self, *, operation: str, status: int, reason: str) -> None:
        super().__init__(f"{operation}: access denied ({status}): {reason}")
        self.operation = operation
        self.status = status
        self.reason = reason


class StoreClosedError(ContractError):
    """The store (or ``StoreClient``) was closed before this call; nothing was done.

    The same error from every backend: ``backend`` is ``"memory"``, ``"sqlite"``,
    ``"postgres"`` or ``"service"``; ``operation`` the call that was refused.
    Retrying on the same handle cannot succeed: open the store again.
    """

    def __init__(self, *, backend: str, operation: str = "") -> None:
        call = f"{operation}: " if operation else ""
        super().__init__(f"{call}the {backend} store is closed")
        self.backend = backend
        self.operation = operation


class ActivityFailedError(ContractError):
    """An activity failed for good: a permanent error, or transient errors past the attempts.

    Not retryable: the engine's retry policy has already run (it retries only a
    :class:`TransientError`), so the same call gets the same answer. ``retryable``
    says which way it ended: True when a transient cause ran out of attempts (a
    new run may succeed once the trouble passes), False when the cause was permanent.

    Attributes:
        activity: the activity's name.
        error_type: the class name of the last error.
        reason: its message (``message`` is this error's own, as on every error).
        retryable: whether that error was transient (the attempts ran out).
        attempts: how many times the activity ran.
        error: the error itself when the engine runs in this process, or when it
            is an agentledger error rebuilt from its fields; else None.
    """

    def __init__(
        self,
        *,
        activity: str,
        error_type: str,
        reason: str,
        retryable: bool,
        attempts: int,
        error: BaseException | None = None,
    ) -> None:
        super().__init__(f"activity {activity} failed after {attempts} attempt(s): {reason}")
        self.activity = activity
        self.error_type = error_type
        self.reason = reason
        self.retryable = retryable
        self.attempts = attempts
        self.error = error


class ChildFailedError(ContractError):
    """A run's workflow ended by raising (or without output: terminated, timed out).

    Not retryable: that workflow is over, and asking again gets the same ending.

    Attributes:
        workflow_id: the workflow's id (its run id).
        reason: what went wrong.
        error: the error itself when the engine runs in this process, else None.
    """

    def __init__(self, *, workflow_id: str, reason: str, error: BaseException | None) -> None:
        super().__init__(f"child workflow {workflow_id} failed: {reason}")
        self.workflow_id = workflow_id
        self.reason = reason
        self.error = error


class RunLoopError(ContractError):
    """An unexpected exception in a run's loop, on an engine that waits for a fix.

    Not retryable by a caller: the same code fails the same way. On Temporal it
    fails the workflow task, not the run: Temporal retries the task, so the run
    waits (still running in the store) until a worker with fixed code continues
    it. The in-process engine ends the run failed instead.

    Attributes:
        run_id: the run.
        error_type: the class name of the exception.
        reason: its message.
    """

    def __init__(self, *, run_id: str, error_type: str, reason: str) -> None:
        super().__init__(f"run {run_id!r}: a bug in the run loop: {error_type}: {reason}")
        self.run_id = run_id
        self.error_type = error_type
        self.reason = reason
