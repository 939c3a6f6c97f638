"""Label scope of a token: what a scoped token may touch, and what it hears of the rest [S4].

A token with labels (``tenant=acme``) sees only sessions whose labels include
them, the runs of those sessions, and one-shot runs started with them in
their run labels (a one-shot run belongs to the scope of the token that
started it). To such a token every other row does not exist, and every
answer says so the same way. The whole policy is :func:`check_scope`:

- ``403`` (:class:`AccessDeniedError`) refuses what the *request itself*
  asks for: labels outside the scope (creating a session or one-shot run
  with them, listing by them), or an id to create that is not free for this
  token: held outside its scope, live, ended or purged alike (ids are one
  namespace per store; a purged session's labels are gone, so its ids are
  outside every scope). The answer names the id and nothing of the row.
- ``404`` (:class:`SessionNotFoundError`, :class:`RunNotFoundError`) answers
  a request naming an existing row (to read, write, continue or link) that
  is outside the scope or purged, exactly as the store answers a missing
  one: the same class and fields, and only after the checks the store makes
  of the call as given (a write the store would refuse as malformed is
  refused as malformed, whatever its ids name).

An unscoped token is not checked here: the store answers it, purged rows and
conflicts included. The check reads the store; it refuses or lets the call
through, and the store still makes every decision about the call itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from agentledger.errors import (
    AccessDeniedError,
    NotFoundError,
    RunNotFoundError,
    SessionNotFoundError,
    SessionPurgedError,
)
from agentledger.service.auth import Principal
from agentledger.service.wire import Subject
from agentledger.storage.operations import decide_stateless
from agentledger.storage.protocol import AdminStore
from agentledger.storage.state import StateReader
from agentledger.storage.types import RunMeta, Session
from agentledger.storage.validation import DEFAULT_LIMITS, SizeLimits

__all__ = ["check_scope", "check_stateless"]


class _Place(Enum):
    """Where a named row is, seen from a token's scope."""

    INSIDE = "inside"
    MISSING = "missing"
    OUTSIDE = "outside"  # another scope's, or purged (its labels are gone)


async def _labels_of(store: AdminStore, kind: str, id: str) -> Mapping[str, str] | None:
    """The labels that place a session or run in a scope; None when it does not exist.

    Raises:
        SessionPurgedError: it was purged.
    """
    try:
        if kind == "session":
            session: Session = await store.load_session(id)
            return session.labels
        run: RunMeta = await store.load_run(id)
        if run.session_id:
            return await _labels_of(store, "session", run.session_id)
        return run.labels
    except SessionPurgedError:
        raise
    except NotFoundError:
        return None


async def _place(store: AdminStore, principal: Principal, subject: Subject) -> _Place:
    try:
        labels = await _labels_of(store, subject.kind, subject.id)
    except SessionPurgedError:
        return _Place.OUTSIDE
    if labels is None:
        return _Place.MISSING
    return _Place.INSIDE if principal.may_see(labels) else _Place.OUTSIDE


def _missing(subject: Subject) -> NotFoundError:
    """What the store answers for a missing row of this kind."""
    if subject.kind == "session":
        return SessionNotFoundError(session_id=subject.id)
    return RunNotFoundError(run_id=subject.id)


def _denied(operation: str, reason: str) -> AccessDeniedError:
    return AccessDeniedError(operation=operation, status=403, reason=reason)


def check_stateless(
    plan: Callable[[StateReader, Any, SizeLimits], object] | None,
    call: Any,
    limits: SizeLimits = DEFAULT_LIMITS,
) -> None:
    """Run the store's decision of ``call`` up to its first read of stored state.

    What it refuses there, the store refuses whatever is stored, so answering
    it first tells a scoped caller nothing about the rows ``call`` names.

    Raises:
        AgentledgerError: the store's own refusal of the call as given.
    """
    if plan is not None:
        decide_stateless(lambda reader: plan(reader, call, limits))


async def check_scope(
    store: AdminStore, principal: Principal, operation: str, subjects: tuple[Subject, ...]
) -> None:
    """Let a scoped token's call through only if everything it touches is in its scope.

    Labels are checked first, then the rows the call names (in the order the
    store reads them), then the ids it would create.

    Raises:
        AccessDeniedError: (403) labels outside the scope, or an id to create
            that is held outside it or purged.
        SessionNotFoundError, RunNotFoundError: (404) a named row is missing,
            outside the scope or purged (the same answer for each).
    """
    if not principal.labels:
        return
    for subject in subjects:
        if subject.kind == "labels" and not principal.may_see(subject.labels):
            raise _denied(operation, f"labels {subject.labels} are outside the token's scope "
                                     f"{principal.labels}")  # fmt: skip
    for subject in subjects:
        if subject.kind == "labels" or subject.new or not subject.id:
            continue  # no session, no parent, no predecessor: nothing to scope
        if await _place(store, principal, subject) is not _Place.INSIDE:
            raise _missing(subject)
    for subject in subjects:
        if subject.kind == "labels" or not subject.new or not subject.id:
            continue
        if await _place(store, principal, subject) is _Place.OUTSIDE:
            raise _denied(
                operation,
                f"{subject.kind} id {subject.id!r} is not free for this token: ids are shared by "
                f"every scope of the store; choose another",
            )
