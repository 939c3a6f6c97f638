"""Accounting: bytes, records, runs and tokens per run and per session, kept as records are
written, never counted by a scan.

Every backend adds what a write holds to its counters in the write's own transaction,
so a read of one session's or one run's usage is one row, and the totals per label (a
tenant) are a row per label value, kept the same way. Where the rules below are applied:

- tokens, for every backend, by :func:`record_tokens` (the only rule that reads a
  payload, from the plaintext before sealing; :func:`token_rows` for the SQL backends);
- bytes, records and runs: for :class:`~agentledger.storage.MemoryStore` by
  :func:`usage_change`; for SQLite and PostgreSQL by the triggers of their schemas
  (``storage/sqlite/usage.py``, ``storage/postgres/usage.py``), which count each
  inserted row inside the statement inserting it, so a write sends no counter
  statement but its tokens. The conformance suite holds the three to the same
  answers, and ``check`` recounts the rows against the counters.

What is counted:

- ``bytes``: the payload bytes of the records as stored (sealed, when the store
  encrypts at rest: what the records occupy, not what they say);
- ``records``: the records of the run's log (lifecycle records included);
- ``runs``: the session's runs (a run counts 1 for itself);
- tokens: from the runtime's ``model_usage`` records, decoded from the plaintext
  before sealing (``input_tokens``, ``output_tokens``; ``cache_read_tokens`` counts
  as ``cached_tokens``). A ``model_usage`` payload that is not a JSON object with
  whole, non-negative counts adds no tokens (it still adds its bytes and record).

A purge deletes the session's counters with its rows; an import counts what it writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from agentledger.errors import ValidationError
from agentledger.storage.state import Plan
from agentledger.storage.types import Record
from agentledger.storage.validation import MAX_LABEL_KEY_LENGTH, check_labels

__all__ = [
    "MODEL_USAGE",
    "USAGE_COLUMNS",
    "LabelUsage",
    "UsageChange",
    "UsageTotals",
    "add",
    "check_usage_query",
    "record_tokens",
    "token_rows",
    "usage_change",
    "usage_from_row",
    "usage_values",
]

MODEL_USAGE = "model_usage"
"""The record type the runtime writes for one model call's tokens (``UsagePayload``)."""


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a run, a session or a group of sessions holds."""

    bytes: int = 0
    """Payload bytes of its records as stored."""
    records: int = 0
    """Records on its runs' logs."""
    runs: int = 0
    """Runs (1 for a run's own usage)."""
    input_tokens: int = 0
    """Model input tokens its ``model_usage`` records report."""
    output_tokens: int = 0
    """Model output tokens its ``model_usage`` records report."""
    cached_tokens: int = 0
    """Input tokens read from the provider's cache, as its ``model_usage`` records report."""


class LabelUsage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The usage of the sessions carrying one value of a label (a tenant's, say)."""

    key: str
    """The label key grouped by; "" when every matching session is one group."""
    value: str
    """The label's value shared by the group ("" when ``key`` is "")."""
    sessions: int
    """Sessions in the group (purged ones are gone, with their counters)."""
    usage: UsageTotals
    """Their usage, added up."""


class UsageChange(msgspec.Struct, frozen=True, kw_only=True):
    """What one write adds to the counters: per run (with its session) and per session."""

    runs: dict[str, tuple[str, UsageTotals]]
    """Run id -> (its session id, "" for a sessionless run; what the write adds)."""
    sessions: dict[str, UsageTotals]
    """Session id -> what the write adds to the session."""

    def __bool__(self) -> bool:
        return bool(self.runs or self.sessions)


class _Tokens(msgspec.Struct, frozen=True):
    """The counts of a ``model_usage`` payload (its other fields are not read)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0


_DECODE_TOKENS = msgspec.json.Decoder(_Tokens).decode


def record_tokens(record_type: str, payload: bytes) -> tuple[int, int, int] | None:
    """``(input, output, cached)`` tokens a record reports; (0, 0, 0) for any other type.

    None for a ``model_usage`` payload that is not plaintext JSON with whole,
    non-negative counts (sealed bytes, say): it reports nothing that can be read.
    """
    if record_type != MODEL_USAGE:
        return (0, 0, 0)
    try:
        tokens = _DECODE_TOKENS(payload)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    counts = (tokens.input_tokens, tokens.output_tokens, tokens.cache_read_tokens)
    return None if min(counts) < 0 else counts


def add(a: UsageTotals, b: UsageTotals) -> UsageTotals:
    """The sum of two usages."""
    return UsageTotals(
        bytes=a.bytes + b.bytes,
        records=a.records + b.records,
        runs=a.runs + b.runs,
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
    )


def usage_change(
    plan: Plan[Any], new_runs: Iterable[tuple[str, str]], stored_sizes: Sequence[int] | None = None
) -> UsageChange:
    """What ``plan`` adds to the counters.

    Args:
        plan: the write's plan; its records are counted (tokens from their plaintext).
        new_runs: ``(run_id, session_id)`` of each run the plan creates.
        stored_sizes: each record's payload size as stored, in order (sealed sizes);
            None when stored as given.
    """
    runs: dict[str, tuple[str, UsageTotals]] = {}
    sessions: dict[str, UsageTotals] = {}
    for run_id, session_id in new_runs:
        runs[run_id] = (session_id, UsageTotals(runs=1))
        if session_id:
            sessions[session_id] = add(sessions.get(session_id, UsageTotals()), UsageTotals(runs=1))
    for i, record in enumerate(plan.records):
        size = len(record.payload) if stored_sizes is None else stored_sizes[i]
        tokens = record_tokens(record.type, record.payload) or (0, 0, 0)
        delta = UsageTotals(
            bytes=size,
            records=1,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            cached_tokens=tokens[2],
        )
        session_id, before = runs.get(record.run_id, (record.session_id, UsageTotals()))
        runs[record.run_id] = (session_id, add(before, delta))
        if record.session_id:
            sessions[record.session_id] = add(sessions.get(record.session_id, UsageTotals()), delta)
    return UsageChange(runs=runs, sessions=sessions)


def token_rows(records: Iterable[Record]) -> list[tuple[int, int, int, str]]:
    """``(input, output, cached, run_id)`` for each record of ``records`` reporting tokens.

    What the SQL backends add to a run's counters themselves (see
    :mod:`agentledger.storage.usage_sql`): bytes, records and runs are counted by their
    schema as rows are inserted; tokens are read here, from the plaintext, before
    sealing. Most writes hold no ``model_usage`` record and add nothing here.
    """
    rows = []
    for record in records:
        if record.type == MODEL_USAGE:
            tokens = record_tokens(MODEL_USAGE, record.payload)
            if tokens is not None and any(tokens):
                rows.append((*tokens, record.run_id))
    return rows


USAGE_COLUMNS = ("bytes", "records", "runs", "input_tokens", "output_tokens", "cached_tokens")
"""The counter columns every backend stores, in :class:`UsageTotals` field order."""


def usage_values(usage: UsageTotals) -> tuple[int, ...]:
    """``usage`` in :data:`USAGE_COLUMNS` order."""
    return (
        usage.bytes,
        usage.records,
        usage.runs,
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_tokens,
    )


def usage_from_row(row: Sequence[Any]) -> UsageTotals:
    """A :class:`UsageTotals` from counters in :data:`USAGE_COLUMNS` order."""
    return UsageTotals(**dict(zip(USAGE_COLUMNS, (int(v) for v in row), strict=True)))


def check_usage_query(key: object, labels: object) -> dict[str, str]:
    """Check a ``usage_by_label`` call: the key grouped by, then the label filter.

    Raises:
        ValidationError: ``key`` is not a label key (or ""), or ``labels`` is not a filter.
    """
    if not isinstance(key, str) or len(key) > MAX_LABEL_KEY_LENGTH or "\x00" in key:
        expected = f'a label key of at most {MAX_LABEL_KEY_LENGTH} characters, or ""'
        raise ValidationError(field="key", expected=expected, got=key)
    return check_labels("labels", {} if labels is None else labels)
