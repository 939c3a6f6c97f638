"""[G3] The accounting SQL both SQL backends share: the counter upserts a write adds, the
reads of one session's or run's counters, and the per-label totals in one query.

The two backends differ only in table names and parameter marks, given here as
:class:`UsageTables`; the statements are otherwise the same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentledger.storage.accounting import (
    USAGE_COLUMNS,
    LabelUsage,
    UsageChange,
    usage_from_row,
    usage_values,
)

__all__ = ["UsageTables", "label_rows"]


@dataclass(frozen=True)
class UsageTables:
    """One backend's names for the counter tables, the session and label tables, and its
    parameter mark (``?`` or ``%s``)."""

    runs: str
    sessions: str
    all_sessions: str
    labels: str
    mark: str

    def _upsert(self, table: str, key: Sequence[str]) -> str:
        names = [*key, *USAGE_COLUMNS]
        marks = ", ".join([self.mark] * len(names))
        adds = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in USAGE_COLUMNS)
        return (
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks}) "
            f"ON CONFLICT ({key[0]}) DO UPDATE SET {adds}"
        )

    @property
    def upsert_run(self) -> str:
        """Add to a run's counters: ``(run_id, session_id, *counters)``."""
        return self._upsert(self.runs, ("run_id", "session_id"))

    @property
    def upsert_session(self) -> str:
        """Add to a session's counters: ``(session_id, *counters)``."""
        return self._upsert(self.sessions, ("session_id",))

    def changes(self, change: UsageChange) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """The upserts adding ``change``, each with its rows (runs, then sessions)."""
        out: list[tuple[str, list[tuple[Any, ...]]]] = []
        if change.runs:
            rows = [(r, s, *usage_values(u)) for r, (s, u) in change.runs.items()]
            out.append((self.upsert_run, rows))
        if change.sessions:
            rows = [(s, *usage_values(u)) for s, u in change.sessions.items()]
            out.append((self.upsert_session, rows))
        return out

    @property
    def session_row(self) -> str:
        """One session's counters."""
        return (
            f"SELECT {', '.join(USAGE_COLUMNS)} FROM {self.sessions} WHERE session_id = {self.mark}"
        )

    @property
    def run_row(self) -> str:
        """One run's counters."""
        return f"SELECT {', '.join(USAGE_COLUMNS)} FROM {self.runs} WHERE run_id = {self.mark}"

    def by_label(self, key: str, labels: Mapping[str, str]) -> tuple[str, list[object]]:
        """The totals of ``usage_by_label(key, labels)`` as one statement and its parameters.

        Driven from the label index: the rows of ``key`` (or of the first filter label,
        or every session when neither is given), each other filter label an index probe,
        each session's counters one primary-key lookup.
        """
        m = self.mark
        sums = ", ".join(f"coalesce(sum(u.{c}), 0)" for c in USAGE_COLUMNS)
        params: list[object] = []
        filters = dict(labels)
        if key:
            source, where, group = f"{self.labels} g", [f"g.key = {m}"], "g.value"
            params.append(key)
        elif filters:
            first, value = next(iter(filters.items()))
            del filters[first]
            source, where, group = f"{self.labels} g", [f"g.key = {m}", f"g.value = {m}"], "''"
            params += [first, value]
        else:
            source, where, group = f"{self.all_sessions} g", [], "''"
        for k, v in filters.items():
            where.append(
                f"EXISTS (SELECT 1 FROM {self.labels} f WHERE f.session_id = g.session_id "
                f"AND f.key = {m} AND f.value = {m})"
            )
            params += [k, v]
        sql = (
            f"SELECT {group}, count(*), {sums} FROM {source} "
            f"LEFT JOIN {self.sessions} u ON u.session_id = g.session_id"
            + (f" WHERE {' AND '.join(where)}" if where else "")
            + (f" GROUP BY {group} ORDER BY {group}" if key else "")
        )
        return sql, params


def label_rows(key: str, rows: Sequence[Sequence[Any]]) -> list[LabelUsage]:
    """The answer of :meth:`UsageTables.by_label` (groups of no session dropped)."""
    return [
        LabelUsage(key=key, value=str(row[0]), sessions=int(row[1]), usage=usage_from_row(row[2:]))
        for row in rows
        if int(row[1])
    ]
