"""The request structs of the store operations that are not a type of their own: how the
arguments of one ``Store`` or ``SessionAdmin`` method travel (to the service, to a tracing
wrapper, to a backend), declared once for :mod:`.operations`."""

from __future__ import annotations

from datetime import datetime

import msgspec

from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT, DEFAULT_SEARCH_LIMIT
from agentledger.storage.types import Record

__all__ = [
    "ChainQuery",
    "RecordBatch",
    "RunPageQuery",
    "RunRef",
    "RunsBySessionQuery",
    "SearchRequest",
    "SessionCreate",
    "SessionEnd",
    "SessionPageQuery",
    "SessionPurge",
    "SessionRef",
    "SessionsQuery",
    "ToolResultRef",
    "ToolResultSave",
    "UsageQuery",
]


class RunRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one run."""

    run_id: str


class ChainQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one run's transcript chain: whole, or ``windowed`` to the model input's start."""

    run_id: str
    windowed: bool = False


class RecordBatch(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[B1] Ordinary records of one run, in order, stored all or none."""

    records: list[Record]


class ToolResultSave(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Save a tool call's result unless one is saved (the first save wins)."""

    run_id: str
    call_key: str
    data: bytes


class ToolResultRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one tool call's saved result."""

    run_id: str
    call_key: str


class SessionRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Names one session."""

    session_id: str


class SessionPurge(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Purge a session [D7], only if its digest is ``expected_digest`` when one is given [A1];
    with ``cascade`` [G2] also the sessions holding copies of its history, within ``scope``
    (set by the service to a scoped token's labels, never by the caller)."""

    session_id: str
    expected_digest: str = ""
    cascade: bool = False
    scope: dict[str, str] = msgspec.field(default_factory=dict)


class RunPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of a run's records [L9]."""

    run_id: str
    cursor: str = ""
    limit: int = DEFAULT_PAGE_LIMIT


class SessionPageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of a session's records [L9]."""

    session_id: str
    cursor: str = ""
    limit: int = DEFAULT_PAGE_LIMIT


class SessionCreate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Create a session with its fixed labels [D4] [D6]; no ``created_at``: the store's clock."""

    session_id: str
    created_at: datetime | None = None
    labels: dict[str, str] | None = None


class SessionEnd(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """End a session [D2]."""

    session_id: str
    ended_at: datetime


# Status filters travel as strings: the store, not the wire, refuses unknown ones.
class RunsBySessionQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A session's runs, optionally only those with these statuses."""

    session_id: str
    statuses: list[str] | str = msgspec.field(default_factory=list)


class SessionsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of sessions, newest first, filtered by statuses and labels [D6]."""

    statuses: list[str] | str = msgspec.field(default_factory=list)
    labels: dict[str, str] | None = None
    cursor: str = ""
    limit: int = DEFAULT_PAGE_LIMIT


class UsageQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[G3] UsageTotals totals grouped by the value of label ``key`` ("" for one group), over the
    sessions carrying ``labels``."""

    key: str = ""
    labels: dict[str, str] | None = None


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of the messages holding every word of ``text``, newest first [G1]."""

    text: str
    labels: dict[str, str] | None = None
    session_id: str = ""
    limit: int = DEFAULT_SEARCH_LIMIT
    cursor: str = ""
