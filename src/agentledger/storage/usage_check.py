"""[G3] ``check``'s audit of the usage counters: what they say against what the rows hold.

The backends' checkers read the rows (sizes and counts per run in SQL, the
``model_usage`` payloads) and the counters, and this module compares them, so a
counter that drifted from its records (a damaged row, a write that skipped it)
is a finding that names the run or session and both values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agentledger.storage.accounting import UsageTotals, add, record_tokens

__all__ = ["LabelCount", "RunCount", "usage_findings"]

RunCount = tuple[str, str, int, int]
"""A run as its rows hold it: ``(run_id, session_id, payload bytes, records)``."""
LabelCount = tuple[int, UsageTotals]
"""A label value's totals as kept: ``(sessions, usage)``."""


def usage_findings(
    runs: Iterable[RunCount],
    usage_records: Iterable[tuple[str, str, bytes]],
    kept_runs: Mapping[str, UsageTotals],
    kept_sessions: Mapping[str, UsageTotals],
    sessions: Iterable[str],
    *,
    sealed: bool,
    session_labels: Iterable[tuple[str, str, str]] = (),
    kept_labels: Mapping[tuple[str, str], LabelCount] | None = None,
) -> list[str]:
    """Each difference between the counters kept and a count of the rows, as a sentence.

    Args:
        runs: every stored run's counts.
        usage_records: ``(run_id, type, payload)`` of every ``model_usage`` record.
        kept_runs: the run counters, by run id.
        kept_sessions: the session counters, by session id.
        sessions: every stored session id.
        sealed: payloads are sealed at rest: tokens cannot be counted here and
            are not compared (bytes, records and runs are).
        session_labels: ``(session_id, key, value)`` of every stored session label.
        kept_labels: the per-label totals, by ``(key, value)`` (shards added up); None
            for a store that keeps none.
    """
    tokens: dict[str, tuple[int, int, int]] = {}
    for run_id, type_, payload in usage_records:
        counted = record_tokens(type_, payload) or (0, 0, 0)
        before = tokens.get(run_id, (0, 0, 0))
        tokens[run_id] = (before[0] + counted[0], before[1] + counted[1], before[2] + counted[2])
    expected_runs: dict[str, UsageTotals] = {}
    expected_sessions: dict[str, UsageTotals] = {sid: UsageTotals() for sid in sessions}
    for run_id, session_id, size, records in runs:
        i, o, c = tokens.get(run_id, (0, 0, 0))
        usage = UsageTotals(bytes=size, records=records, runs=1, input_tokens=i,
                            output_tokens=o, cached_tokens=c)  # fmt: skip
        expected_runs[run_id] = usage
        if session_id:
            expected_sessions[session_id] = add(expected_sessions.get(session_id, _ZERO), usage)
    problems = _compare("run", expected_runs, kept_runs, sealed)
    problems += _compare("session", expected_sessions, kept_sessions, sealed)
    if kept_labels is not None:
        problems += _label_findings(session_labels, expected_sessions, kept_labels, sealed)
    return problems


def _label_findings(
    session_labels: Iterable[tuple[str, str, str]],
    sessions: Mapping[str, UsageTotals],
    kept: Mapping[tuple[str, str], LabelCount],
    sealed: bool,
) -> list[str]:
    """The per-label totals against the sessions carrying each label, as counted."""
    expected: dict[tuple[str, str], LabelCount] = {}
    for session_id, key, value in session_labels:
        count, usage = expected.get((key, value), (0, _ZERO))
        expected[(key, value)] = (count + 1, add(usage, sessions.get(session_id, _ZERO)))
    problems = []
    for key, value in sorted(kept.keys() | expected.keys()):
        want_n, want = expected.get((key, value), (0, _ZERO))
        have_n, have = kept.get((key, value), (0, _ZERO))
        wrong = [f"sessions {have_n} (rows: {want_n})"] if want_n != have_n else []
        wrong += [
            f"{f} {getattr(have, f)} (rows: {getattr(want, f)})"
            for f in _fields(sealed)
            if getattr(want, f) != getattr(have, f)
        ]
        if wrong:
            problems.append(
                f"usage totals of label {key!r}={value!r} differ from its sessions' rows: "
                + ", ".join(wrong)
            )
    return problems


def _fields(sealed: bool) -> Sequence[str]:
    return [f for f in UsageTotals.__struct_fields__ if not (sealed and f in _TOKENS)]


_ZERO = UsageTotals()
_TOKENS = ("input_tokens", "output_tokens", "cached_tokens")


def _compare(
    what: str,
    expected: Mapping[str, UsageTotals],
    kept: Mapping[str, UsageTotals],
    sealed: bool,
) -> list[str]:
    problems = []
    for key in sorted(kept.keys() - expected.keys()):
        problems.append(f"usage counters of a {what} that is not stored: {key!r}")
    for key in sorted(expected):
        want, have = expected[key], kept.get(key, _ZERO)
        wrong = [f for f in _fields(sealed) if getattr(want, f) != getattr(have, f)]
        if wrong:
            said = ", ".join(f"{f} {getattr(have, f)} (rows: {getattr(want, f)})" for f in wrong)
            problems.append(f"usage counters of {what} {key!r} differ from its rows: {said}")
    return problems
