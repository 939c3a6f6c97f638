"""Listing sessions newest first [D6]: the filter, the order and the cursor, written once.

A backend asks :func:`session_query` to check a ``list_sessions`` call, then
fetches up to ``query.fetch`` sessions that match ``query.statuses`` and
``query.labels`` (every given key with its value), ordered by
``(created_at, id)`` descending and strictly after ``query.after``, and
hands them to :func:`session_page`.

The cursor is the sort key of the last session returned (keyset paging), so
sessions created or purged between two pages never shift the rest: no gap,
no duplicate. It is bound to the filter that issued it; handing it to a
listing with another filter is a :class:`~agentledger.errors.ValidationError`.
Ids tie-break in code-point order, which is byte order of their UTF-8 text
(SQLite's ``BINARY``, PostgreSQL's ``COLLATE "C"``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from agentledger.errors import ValidationError
from agentledger.storage.cursor import decode_key_cursor, encode_key_cursor
from agentledger.storage.types import Session, SessionPage, SessionStatus
from agentledger.storage.validation import check_labels, check_limit, check_statuses, require_id

__all__ = ["LABEL_PROBE", "SessionQuery", "from_ms", "session_page", "session_query", "to_ms"]

_SCOPE = "sessions"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_EVERY_STATUS = frozenset(SessionStatus)

LABEL_PROBE = 1000
"""How many label index entries a backend counts, at most, to find a filter's rarest label."""


def to_ms(value: datetime) -> int:
    """Milliseconds since the Unix epoch of a checked (aware, UTC, whole-ms) datetime."""
    return (value - _EPOCH) // _MS


def from_ms(value: int) -> datetime:
    """The UTC datetime ``value`` milliseconds after the Unix epoch."""
    return _EPOCH + _MS * value


@dataclass(frozen=True)
class SessionQuery:
    """A checked ``list_sessions`` call: what to fetch and where the page starts."""

    statuses: frozenset[SessionStatus]
    """Keep sessions with one of these statuses; empty keeps every status."""
    labels: dict[str, str]
    """Keep sessions that carry every one of these labels (with this value)."""
    after: tuple[datetime, str] | None
    """Only sessions whose ``(created_at, id)`` is smaller; None: from the newest."""
    limit: int
    """Sessions on the page."""
    scope_id: str
    """The filter's identity, which the cursor carries."""

    @property
    def fetch(self) -> int:
        """How many sessions to fetch: one more than the page, to know if more follow."""
        return self.limit + 1

    @property
    def status_filter(self) -> frozenset[SessionStatus]:
        """The statuses a fetch must filter by: none when ``statuses`` keeps every status.

        One status is an index range on each backend (sessions and the label
        index are ordered by status, then newest first); several that are not
        all of them are checked per row.
        """
        return frozenset() if self.statuses == _EVERY_STATUS else self.statuses

    def labels_rarest_first(self, counts: Mapping[tuple[str, str], int]) -> list[tuple[str, str]]:
        """The filter's labels, the one with the fewest index entries first (ties by key).

        A fetch drives from the first (its index range, newest first) and
        checks the rest per session, so a page reads at most the rarest
        label's entries. ``counts`` are the backend's probes, each capped at
        :data:`LABEL_PROBE` past the cursor: a bounded cost that still tells
        a rare label from a common one.
        """
        return sorted(self.labels.items(), key=lambda item: (counts.get(item, 0), item))

    def matches(self, session: Session) -> bool:
        """Whether ``session`` passes the filter and comes after the cursor."""
        if self.statuses and session.status not in self.statuses:
            return False
        if any(session.labels.get(k) != v for k, v in self.labels.items()):
            return False
        return self.after is None or (session.created_at, session.id) < self.after


def session_query(
    statuses: Iterable[SessionStatus], labels: Mapping[str, str], cursor: str, limit: int
) -> SessionQuery:
    """Check a ``list_sessions`` call: statuses, labels, limit, then the cursor."""
    wanted = check_statuses(statuses, SessionStatus)
    filter_labels = check_labels("labels", labels)
    size = check_limit(limit)
    canonical = msgspec.json.encode([sorted(wanted), sorted(filter_labels.items())])
    scope_id = hashlib.blake2b(canonical, digest_size=12).hexdigest()
    key = decode_key_cursor(cursor, _SCOPE, scope_id, 2)
    after: tuple[datetime, str] | None = None
    if key:
        millis, session_id = key
        try:
            if not millis.lstrip("-").isdigit():
                raise ValueError(millis)
            after = (from_ms(int(millis)), require_id("cursor", session_id))
        except (ValueError, OverflowError, ValidationError) as e:
            raise ValidationError(
                field="cursor", expected="a position this store issued", got=cursor
            ) from e
    return SessionQuery(
        statuses=wanted, labels=filter_labels, after=after, limit=size, scope_id=scope_id
    )


def session_page(query: SessionQuery, fetched: Sequence[Session]) -> SessionPage:
    """The page of ``fetched`` (up to ``query.fetch`` matches, newest first) and its cursor."""
    sessions = list(fetched[: query.limit])
    next_cursor = ""
    if len(fetched) > query.limit:
        last = sessions[-1]
        key = (str(to_ms(last.created_at)), last.id)
        next_cursor = encode_key_cursor(_SCOPE, query.scope_id, key)
    return SessionPage(sessions=sessions, next_cursor=next_cursor)
