"""[G3] The accounting SQL both SQL backends share: the token counts a write adds, the
reads of one session's or run's counters, and the per-label totals in one query.

The two backends differ only in table names and parameter marks, given here as
:class:`UsageTables`; the statements are otherwise the same text.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentledger.storage.accounting import USAGE_COLUMNS, LabelUsage, usage_from_row

__all__ = ["UsageTables", "label_rows"]


@dataclass(frozen=True)
class UsageTables:
    """One backend's names for the counter tables, the session and label tables, and its
    parameter mark (``?`` or ``%s``)."""

    runs: str
    sessions: str
    all_sessions: str
    labels: str
    label_totals: str
    mark: str

    @functools.cached_property
    def add_tokens(self) -> str:
        """Add a run's tokens: ``(input, output, cached, run_id)`` (see :func:`token_rows`).

        The only counter statement a write sends itself: bytes, records and runs are
        counted by the schema's triggers as the rows are inserted, and every change of a
        run's counters is added up into its session's and its labels' by triggers too.
        """
        m = self.mark
        return (
            f"UPDATE {self.runs} SET input_tokens = input_tokens + {m}, "
            f"output_tokens = output_tokens + {m}, cached_tokens = cached_tokens + {m} "
            f"WHERE run_id = {m}"
        )

    @functools.cached_property
    def session_row(self) -> str:
        """One session's counters."""
        return (
            f"SELECT {', '.join(USAGE_COLUMNS)} FROM {self.sessions} WHERE session_id = {self.mark}"
        )

    @functools.cached_property
    def run_row(self) -> str:
        """One run's counters."""
        return f"SELECT {', '.join(USAGE_COLUMNS)} FROM {self.runs} WHERE run_id = {self.mark}"

    def by_label(self, key: str, labels: Mapping[str, str]) -> tuple[str, list[object]]:
        """The totals of ``usage_by_label(key, labels)`` as one statement and its parameters.

        Grouped by one label key (filtered, if at all, on a value of that same key), or
        one label's total, is read from the per-label totals: a few rows per label value
        (PostgreSQL keeps each in shards), whatever the number of sessions. Any other
        filter (sessions carrying two labels at once, or none) is summed over the
        matching sessions' counters, driven from the label index.
        """
        m = self.mark
        filters = dict(labels)
        if (key and set(filters) <= {key}) or (not key and len(filters) == 1):
            group_key = key or next(iter(filters))
            where, params = [f"key = {m}"], list[object]([group_key])
            if filters:
                where.append(f"value = {m}")
                params.append(filters[group_key])
            group = "value" if key else "''"
            totals = ", ".join(f"sum({c})" for c in USAGE_COLUMNS)
            sql = (
                f"SELECT {group}, sum(sessions), {totals} FROM {self.label_totals} "
                f"WHERE {' AND '.join(where)}" + (" GROUP BY value ORDER BY value" if key else "")
            )
            return sql, params
        sums = ", ".join(f"coalesce(sum(u.{c}), 0)" for c in USAGE_COLUMNS)
        params = list[object]()
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

    @functools.cached_property
    def label_totals_rows(self) -> str:
        """Every label's totals (shards added up): ``key, value, sessions, *counters``."""
        totals = ", ".join(f"sum({c})" for c in USAGE_COLUMNS)
        return (
            f"SELECT key, value, sum(sessions), {totals} FROM {self.label_totals} "
            "GROUP BY key, value"
        )


def label_rows(key: str, rows: Sequence[Sequence[Any]]) -> list[LabelUsage]:
    """The answer of :meth:`UsageTables.by_label` (groups of no session dropped)."""
    return [
        LabelUsage(key=key, value=str(row[0]), sessions=int(row[1]), usage=usage_from_row(row[2:]))
        for row in rows
        if row[1] is not None and int(row[1])
    ]
