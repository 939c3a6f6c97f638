"""``check``'s audit of the search index: its entries against the records they come from.

The backends' checkers read the indexed records (each row's checksum verified) and the
index's entries, and this module compares them: an entry missing for a message, an entry
no message has, or an entry whose role, time or text differs from its message is a
finding that names the session, run, record and message (see
:mod:`agentledger.storage.search` for what is indexed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from agentledger.storage.search import index_entries
from agentledger.storage.types import Record

__all__ = ["StoredEntry", "index_findings", "left_out_findings"]

StoredEntry = tuple[str, str, int, int, str, datetime, str]
"""An entry as the index keeps it: ``(session_id, run_id, seq, message, role, time, text)``."""

_Key = tuple[str, str, int, int]


def _name(key: _Key) -> str:
    session_id, run_id, seq, message = key
    return f"session {session_id!r}, run {run_id!r}, record {seq}, message {message}"


def index_findings(
    records: Iterable[Record],
    entries: Iterable[StoredEntry],
    *,
    maybe_unindexed: Callable[[Record], bool] | None = None,
    damaged: Iterable[tuple[str, int]] = (),
) -> list[str]:
    """Each difference between the index's ``entries`` and what ``records`` say it holds.

    Args:
        records: every stored record of an indexed type (its checksum verified).
        entries: every entry of the index.
        maybe_unindexed: a record the index's build has not reached yet: its entries
            may be missing (those present are still compared).
        damaged: ``(run_id, seq)`` of records that failed their checksum (reported by
            the caller): their entries are neither expected nor reported.
    """
    expected: dict[_Key, tuple[str, datetime, str]] = {}
    optional: set[_Key] = set()
    for record in records:
        later = maybe_unindexed is not None and maybe_unindexed(record)
        for entry in index_entries(record):
            key = (record.session_id, record.run_id, int(record.id), entry.message_index)
            expected[key] = (entry.role, record.timestamp, entry.body)
            if later:
                optional.add(key)
    skip = set(damaged)
    problems: list[str] = []
    seen: set[_Key] = set()
    for session_id, run_id, seq, message, role, at, body in entries:
        key = (session_id, run_id, int(seq), int(message))
        if (run_id, int(seq)) in skip:
            continue
        if key in seen:
            problems.append(f"search index entry repeated: {_name(key)}")
            continue
        seen.add(key)
        want = expected.get(key)
        if want is None:
            problems.append(f"search index entry of no stored message: {_name(key)}")
            continue
        pairs = zip(("role", "time", "text"), (role, at, body), want, strict=True)
        wrong = [what for what, have, should in pairs if have != should]
        if wrong:
            problems.append(
                f"search index entry differing from its message ({', '.join(wrong)}): {_name(key)}"
            )
    for key in sorted(expected.keys() - seen - optional):
        problems.append(f"search index entry missing for a message: {_name(key)}")
    return problems


def left_out_findings(sealed_sessions: Iterable[str], left_out: Iterable[str]) -> list[str]:
    """A sealed store indexes no text and counts each session with transcript records as
    left out: each session of ``sealed_sessions`` (those of its indexed records) missing
    from ``left_out``, as a sentence."""
    missing = set(sealed_sessions) - set(left_out)
    return [f"sealed session not counted as left out of search: {s!r}" for s in sorted(missing)]
