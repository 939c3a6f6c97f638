"""One page of ``list_sessions`` on PostgreSQL [D6], read from an index ordered as the page is.

The SQLite module's twin (:mod:`agentledger.storage.sqlite.session_list`):
without labels a range of ``agentledger_sessions_newest_first`` (or
``_by_status`` for one status); with labels a range of the label index
(``agentledger_session_labels``, migration 11) for the rarest label, each
entry joined to its session, the other labels checked per entry by primary
key. The cursor is a row comparison, which the index range starts at, so a
page deep in the listing costs what the first does. Ids compare byte-wise
(``COLLATE "C"``).
"""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agentledger.storage.listing import LABEL_PROBE, SessionQuery, session_page
from agentledger.storage.postgres.rows import SESSION_COLUMNS, session_from_row
from agentledger.storage.types import SessionPage

__all__ = ["page_sql", "session_list"]

_COLUMNS = ", ".join(f"s.{name.strip()}" for name in SESSION_COLUMNS.split(","))
_OTHER_LABEL = (
    "EXISTS (SELECT 1 FROM agentledger_session_labels o "
    "WHERE o.session_id = l.session_id AND o.key = %s AND o.value = %s)"
)


async def session_list(conn: AsyncConnection[TupleRow], query: SessionQuery) -> SessionPage:
    """[D6] one page of sessions newest first, filtered in SQL (see :mod:`..listing`)."""
    cur = await conn.execute(*page_sql(query))
    rows = [session_from_row(row).public() for row in await cur.fetchall()]
    if len(query.labels) > 1:  # one branch of a UNION ALL: put its order beyond doubt
        rows.sort(key=lambda session: (session.created_at, session.id), reverse=True)
    return session_page(query, rows)


def page_sql(query: SessionQuery) -> tuple[str, list[object]]:
    """The statement that fetches ``query``'s page, and its parameters (for EXPLAIN too).

    Several labels: one branch per label, each driven by its label's index
    range; a probe in the same statement counts each label's entries past the
    cursor (up to :data:`LABEL_PROBE`) and only the rarest label's branch runs
    (the others are gated off before they read anything). One round trip.
    """
    if not query.labels:
        sql, params = _unlabelled(query)
        return sql, [*params, query.fetch]
    labels = list(query.labels.items())
    if len(labels) == 1:
        sql, params = _driven_by(query, labels[0], [], None)
        return sql, [*params, query.fetch]
    probe, params = _probe(query, labels)
    branches: list[str] = []
    for i, label in enumerate(labels):
        sql, branch_params = _driven_by(query, label, labels[:i] + labels[i + 1 :], i)
        branches.append(f"({sql})")
        params += (*branch_params, query.fetch)
    return f"WITH driver AS MATERIALIZED ({probe}) " + " UNION ALL ".join(branches), params


def _status_terms(query: SessionQuery, one: str, several: str) -> tuple[list[str], list[object]]:
    """One status: a range on ``one``'s index; several: checked per row on ``several``."""
    statuses = sorted(str(status) for status in query.status_filter)
    if len(statuses) == 1:
        return [f"{one}.status = %s"], [statuses[0]]
    if statuses:
        return [f"{several}.status = ANY(%s)"], [statuses]
    return [], []


def _after_terms(query: SessionQuery, created_at: str, id_: str) -> tuple[list[str], list[object]]:
    if query.after is None:
        return [], []
    return [f'({created_at}, {id_} COLLATE "C") < (%s, %s)'], [*query.after]


def _unlabelled(query: SessionQuery) -> tuple[str, list[object]]:
    where, params = _status_terms(query, "s", "s")
    after, after_params = _after_terms(query, "s.created_at", "s.id")
    where += after
    params += after_params
    sql = f"SELECT {_COLUMNS} FROM agentledger_sessions s"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + ' ORDER BY s.created_at DESC, s.id COLLATE "C" DESC LIMIT %s', params


def _driven_by(
    query: SessionQuery,
    label: tuple[str, str],
    others: list[tuple[str, str]],
    gate: int | None,
) -> tuple[str, list[object]]:
    """The page read from ``label``'s index range, ``others`` checked per entry; with
    ``gate``, only if the probe chose this label (the ``driver`` CTE)."""
    status, status_params = _status_terms(query, "l", "s")
    after, after_params = _after_terms(query, "l.created_at", "l.session_id")
    where = ["l.key = %s", "l.value = %s", *status, *after]
    params: list[object] = [*label, *status_params, *after_params]
    for other in others:
        where.append(_OTHER_LABEL)
        params += other
    if gate is not None:
        where.append(f"(SELECT i FROM driver) = {gate:d}")
    sql = (
        f"SELECT {_COLUMNS} FROM agentledger_session_labels l "
        f"JOIN agentledger_sessions s ON s.id = l.session_id WHERE {' AND '.join(where)} "
        'ORDER BY l.created_at DESC, l.session_id COLLATE "C" DESC LIMIT %s'
    )
    return sql, params


def _probe(query: SessionQuery, labels: list[tuple[str, str]]) -> tuple[str, list[object]]:
    """Which label drives: the fewest index entries past the cursor, counted up to
    :data:`LABEL_PROBE`, ties to the first by key (as ``labels_rarest_first`` orders)."""
    status, status_params = _status_terms(query, "l", "l")
    if len(status_params) != 1:  # several statuses: the probe counts every status
        status, status_params = [], []
    after, after_params = _after_terms(query, "l.created_at", "l.session_id")
    where = " AND ".join(["l.key = %s", "l.value = %s", *status, *after])
    count = (
        f"(SELECT count(*) FROM (SELECT 1 FROM agentledger_session_labels l WHERE {where} "
        "LIMIT %s) x)"
    )
    params: list[object] = []
    for label in labels:
        params += (*label, *status_params, *after_params, LABEL_PROBE)
    rows = ", ".join(f"({i:d}, {count})" for i in range(len(labels)))
    return f"SELECT i FROM (VALUES {rows}) AS v(i, c) ORDER BY c, i LIMIT 1", params
