"""One page of ``list_sessions`` on SQLite [D6], read from an index ordered as the page is.

Without labels the page is a range of ``sessions_newest_first`` (or of
``sessions_by_status`` for one status). With labels it is a range of the
label index (``session_labels``, schema migration 13) for the rarest label,
newest first, each entry joined to its session by id; the other labels are
checked per entry by primary key. So a page reads O(page) index entries for
one label, and at most the rarest label's entries for several; never a sort.
"""

from __future__ import annotations

import sqlite3

from agentledger.storage.listing import LABEL_PROBE, SessionQuery, session_page, to_ms
from agentledger.storage.sqlite.rows import SESSION_COLUMNS, decode_session
from agentledger.storage.types import SessionPage

__all__ = ["page_sql", "session_list"]

_COLUMNS = ", ".join(f"s.{name.strip()}" for name in SESSION_COLUMNS.split(","))
_OTHER_LABEL = (
    "EXISTS (SELECT 1 FROM session_labels AS o "
    "WHERE o.session_id = l.session_id AND o.key = ? AND o.value = ?)"
)


def session_list(conn: sqlite3.Connection, query: SessionQuery) -> SessionPage:
    """[D6] one page of sessions newest first, filtered in SQL (see :mod:`..listing`)."""
    rows = conn.execute(*page_sql(conn, query)).fetchall()
    return session_page(query, [decode_session(row).public() for row in rows])


def page_sql(conn: sqlite3.Connection, query: SessionQuery) -> tuple[str, list[object]]:
    """The statement that fetches ``query``'s page, and its parameters (for EXPLAIN too)."""
    sql, params = (_labelled if query.labels else _unlabelled)(conn, query)
    return sql, [*params, query.fetch]


def _status_terms(query: SessionQuery, one: str, several: str) -> tuple[list[str], list[object]]:
    """One status: a range on ``one``'s index; several: checked per row on ``several``."""
    statuses: list[object] = [str(status) for status in sorted(query.status_filter)]
    if len(statuses) == 1:
        return [f"{one}.status = ?"], statuses
    if statuses:
        return [f"{several}.status IN ({', '.join('?' * len(statuses))})"], statuses
    return [], []


def _after_terms(query: SessionQuery, created_at: str, id_: str) -> tuple[list[str], list[object]]:
    if query.after is None:
        return [], []
    return [f"({created_at}, {id_}) < (?, ?)"], [to_ms(query.after[0]), query.after[1]]


def _unlabelled(conn: sqlite3.Connection, query: SessionQuery) -> tuple[str, list[object]]:
    where, params = _status_terms(query, "s", "s")
    after, after_params = _after_terms(query, "s.created_at", "s.id")
    where += after
    params += after_params
    sql = f"SELECT {_COLUMNS} FROM sessions AS s"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + " ORDER BY s.created_at DESC, s.id DESC LIMIT ?", params


def _labelled(conn: sqlite3.Connection, query: SessionQuery) -> tuple[str, list[object]]:
    labels = list(query.labels.items())
    if len(labels) > 1:
        labels = query.labels_rarest_first(_probe(conn, query))
    (key, value), others = labels[0], labels[1:]
    status, status_params = _status_terms(query, "l", "s")
    after, after_params = _after_terms(query, "l.created_at", "l.session_id")
    where = ["l.key = ?", "l.value = ?", *status, *after]
    params: list[object] = [key, value, *status_params, *after_params]
    for other_key, other_value in others:
        where.append(_OTHER_LABEL)
        params += (other_key, other_value)
    sql = (
        f"SELECT {_COLUMNS} FROM session_labels AS l CROSS JOIN sessions AS s "
        f"ON s.id = l.session_id WHERE {' AND '.join(where)} "
        "ORDER BY l.created_at DESC, l.session_id DESC LIMIT ?"
    )
    return sql, params


def _probe(conn: sqlite3.Connection, query: SessionQuery) -> dict[tuple[str, str], int]:
    """Each label's index entries past the cursor, counted up to :data:`LABEL_PROBE`."""
    status, status_params = _status_terms(query, "l", "l")
    if len(status_params) > 1:  # several statuses: the probe counts every status
        status, status_params = [], []
    after, after_params = _after_terms(query, "l.created_at", "l.session_id")
    where = " AND ".join(["l.key = ?", "l.value = ?", *status, *after])
    sql = f"SELECT count(*) FROM (SELECT 1 FROM session_labels AS l WHERE {where} LIMIT ?)"
    counts: dict[tuple[str, str], int] = {}
    for key, value in query.labels.items():
        params = (key, value, *status_params, *after_params, LABEL_PROBE)
        (count,) = conn.execute(sql, params).fetchone()
        counts[key, value] = int(count)
    return counts
