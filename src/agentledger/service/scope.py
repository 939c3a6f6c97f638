"""Label scope of a token: which sessions and runs a scoped token may touch [S4].

A token with labels (``tenant=acme``) sees only sessions whose labels include
them, the runs of those sessions, and one-shot runs started with them in
their run labels (a one-shot run belongs to the scope of the token that
started it). The check reads the store; it refuses or lets the call through,
and the store still makes every decision about the call itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentledger.errors import AccessDeniedError, NotFoundError, SessionPurgedError
from agentledger.service.auth import Principal
from agentledger.service.wire import Subject
from agentledger.storage.types import RunMeta, Session

__all__ = ["check_scope"]


async def _labels_of(store: Any, subject: Subject) -> Mapping[str, str] | None:
    """The labels that place ``subject`` in a scope; None when it does not exist (yet)."""
    if subject.kind == "labels":
        return subject.labels
    try:
        if subject.kind == "session":
            session: Session = await store.load_session(subject.id)
            return session.labels
        run: RunMeta = await store.load_run(subject.id)
        if run.session_id:
            return await _labels_of(store, Subject("session", run.session_id))
        return run.labels
    except (NotFoundError, SessionPurgedError):
        return None  # the store itself answers for what does not exist


async def check_scope(
    store: Any, principal: Principal, operation: str, subjects: tuple[Subject, ...]
) -> None:
    """Refuse (403) a scoped token's call that touches anything outside its scope.

    Raises:
        AccessDeniedError: a subject lies outside the token's labels.
    """
    if not principal.labels:
        return
    for subject in subjects:
        if subject.kind != "labels" and not subject.id:
            continue  # no session, no parent: nothing to scope
        labels = await _labels_of(store, subject)
        if labels is not None and not principal.may_see(labels):
            what = f"{subject.kind} {subject.id!r}" if subject.id else "labels"
            raise AccessDeniedError(
                operation=operation,
                status=403,
                reason=f"{what} is outside the token's scope {principal.labels}",
            )
