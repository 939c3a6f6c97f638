"""Searching the text of transcripts across sessions, decided once for every backend.

What is indexed: each message of a transcript record (``transcript_messages_seeded``
and ``transcript_messages_appended``) of a session is one *entry*: the model-visible
text of the message (text parts, citations' text, tool inputs and tool results as
text; never thinking, images, documents' bytes or checkpoints). A compaction's
summary (``transcript_window_applied``) is one entry too. A one-shot run (no session)
is not indexed, and neither is a sealed session (encryption at rest): its plaintext
never leaves the seal, and a search counts such sessions as left out.

A backend writes :func:`index_entries` of each record it stores in the record's own
transaction, deletes a session's entries in its purge's transaction, and answers a
:class:`SearchQuery` by fetching up to ``query.fetch`` entries that hold every term of
the query (whole words, case-insensitive), newest first (the entry's id), strictly
before ``query.before``; :func:`search_page` makes the page and its cursor. The cursor is
bound to the query's text and filter. An entry's id grows with the commit order on SQLite
(one writer) and in one session on PostgreSQL (a session's writers take turns until they
commit); across PostgreSQL sessions it grows with the order the entries were written,
which concurrent transactions may commit in another order. Either way a traversal of the
pages shows each entry committed before its first page exactly once.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from agentledger.errors import ValidationError
from agentledger.storage import payloads
from agentledger.storage.cursor import decode_key_cursor, encode_key_cursor
from agentledger.storage.state import Plan
from agentledger.storage.types import PurgeReceipt, Record
from agentledger.storage.validation import check_labels, check_limit, require_id

__all__ = [
    "MAX_SEARCH_TEXT",
    "SNIPPET_CHARS",
    "Entry",
    "SearchHit",
    "SearchPage",
    "SearchQuery",
    "count_purged",
    "index_entries",
    "matches",
    "scope_filter",
    "search_page",
    "search_query",
    "snippet",
    "terms_of",
    "words_of",
]

_SCOPE = "search.records"
"""The cursors' scope: a position in the index of the records' own words (SQLite schema 20,
PostgreSQL 17). A cursor issued by the index before it (scope ``search``, positions of
one row per message) is refused, not read as a position of this one."""
MAX_SEARCH_TEXT = 1000
"""The longest search text accepted, in characters."""
SNIPPET_CHARS = 160
"""About how many characters of a message a hit shows around its first match."""
_WORD = re.compile(r"[^\W_]+")  # letters and digits, as SQLite's unicode61 reads words
_MAX_TERMS = 16


class SearchHit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One message that holds every term searched for.

    ``snippet`` is a short piece of the message's text around its first match, each
    match marked ``**like this**``; ``record_id`` and ``message_index`` locate the
    message in its run's log (``message_index`` counts the messages of that record).
    """

    session_id: str
    run_id: str
    record_id: str
    message_index: int
    role: str  # "user", "assistant", ... or "summary" for a compaction's summary
    timestamp: datetime  # the record's
    snippet: str


class SearchPage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One page of search hits, newest first.

    ``next_cursor`` is opaque and bound to the search; ``""`` means there is nothing
    more. ``left_out`` counts the sessions within the filter that are sealed (encrypted
    at rest) and so never indexed: a search cannot see their text. ``complete`` is
    False while the index of records stored before search existed is still being built.
    """

    hits: list[SearchHit]
    next_cursor: str
    left_out: int = 0
    complete: bool = True


class Entry(NamedTuple):
    """One message of a record as the index keeps it."""

    message_index: int
    role: str
    body: str


_MESSAGES = msgspec.json.Decoder(list[dict[str, Any]])
_ENCODE = msgspec.json.Encoder(order="sorted")


def _result_text(content: object, out: list[str]) -> None:
    if isinstance(content, str):
        out.append(content)
    elif isinstance(content, list):
        for item in content:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                out.append(item["text"])
            elif isinstance(item, str):
                out.append(item)
            elif item is not None:
                out.append(_ENCODE.encode(item).decode())
    elif content is not None:
        out.append(_ENCODE.encode(content).decode())


def _message_text(message: Mapping[str, Any]) -> str:
    out: list[str] = []
    for part in message.get("parts") or ():
        if not isinstance(part, dict):
            continue
        kind = part.get("kind")
        if kind in ("text", "citations") and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind == "tool_use":
            if isinstance(part.get("name"), str):
                out.append(part["name"])
            out.append(_ENCODE.encode(part.get("input")).decode())
        elif kind == "tool_result":
            _result_text(part.get("content"), out)
    return "\n".join(t for t in out if t)


def index_entries(record: Record) -> list[Entry]:
    """The entries a store indexes for ``record`` (none for a record without text).

    Only a session's records are indexed; a payload that does not decode (the
    store refused it on write, so only old damage) gives no entries.
    """
    if not record.session_id:
        return []
    if record.type in payloads.TRANSCRIPT_TYPES:
        try:
            messages = _MESSAGES.decode(record.payload)
        except msgspec.DecodeError:
            return []
        entries = []
        for index, message in enumerate(messages):
            body = _message_text(message)
            if body:
                role = message.get("role")
                entries.append(Entry(index, role if isinstance(role, str) else "", body))
        return entries
    if record.type == payloads.TRANSCRIPT_WINDOW:
        try:
            window = payloads.TranscriptWindow.decode(record.payload)
        except ValidationError:
            return []
        return [Entry(0, "summary", window.summary)] if window.summary else []
    return []


def terms_of(text: str) -> list[str]:
    """The words of ``text``, lower-cased, in order, without repeats."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        seen.setdefault(word, None)
    return list(seen)


_ASCII_SPACES = {c: " " for c in range(128) if not chr(c).isalnum()}


def words_of(body: str) -> str:
    """``body``'s words, lower-cased, one space between them: what PostgreSQL indexes, so
    that its parser (which reads ``-1182`` as a number and keeps e-mail addresses whole)
    finds the words every backend finds."""
    if body.isascii():  # the same words, read without the regular expression
        return " ".join(body.translate(_ASCII_SPACES).lower().split())
    return " ".join(_WORD.findall(body.lower()))


def matches(terms: Sequence[str], body: str) -> bool:
    """Whether ``body`` holds every term as a whole word (case-insensitive)."""
    words = set(words_of(body).split(" "))
    return all(term in words for term in terms)


def snippet(body: str, terms: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``body`` around its first match, every match in
    them marked ``**like this**``; ``…`` where text is cut."""
    wanted = set(terms)
    found = [m for m in _WORD.finditer(body) if m.group().lower() in wanted]
    first = found[0].start() if found else 0
    start = max(0, first - width // 3)
    if start > 0:  # do not cut a word
        space = body.rfind(" ", 0, start)
        start = space + 1 if space >= 0 and start - space < 20 else start
    end = min(len(body), start + width)
    if end < len(body):
        space = body.find(" ", end)
        end = space if space >= 0 and space - end < 20 else end
    pieces = ["…" if start > 0 else ""]
    at = start
    for m in found:
        if m.start() < start or m.end() > end:
            continue
        pieces.append(body[at : m.start()])
        pieces.append(f"**{m.group()}**")
        at = m.end()
    pieces.append(body[at:end])
    pieces.append("…" if end < len(body) else "")
    return " ".join("".join(pieces).split())


@dataclass(frozen=True)
class SearchQuery:
    """A checked ``search`` call: what to fetch and where the page starts."""

    text: str
    """The text as given (PostgreSQL reads its words itself)."""
    terms: tuple[str, ...]
    """The words every hit holds, lower-cased."""
    labels: dict[str, str]
    """Only sessions that carry every one of these labels."""
    session_id: str
    """Only this session; "" for every session."""
    before: int | None
    """Only entries whose id is smaller; None: from the newest."""
    limit: int
    """Hits on the page."""
    scope_id: str
    """The search's identity, which the cursor carries."""

    @property
    def fetch(self) -> int:
        """How many entries to fetch: one more than the page, to know if more follow."""
        return self.limit + 1

    def in_scope(self, session_id: str, labels: Mapping[str, str]) -> bool:
        """Whether a session of these labels is within the filter."""
        if self.session_id and session_id != self.session_id:
            return False
        return all(labels.get(k) == v for k, v in self.labels.items())


def search_query(
    text: object,
    labels: Mapping[str, str] | None,
    session_id: str | None,
    cursor: str,
    limit: int,
) -> SearchQuery:
    """Check a ``search`` call: the text, the filter, the limit, then the cursor.

    Raises:
        ValidationError: text with no word in it or too long, a bad label filter,
            session id, limit, or a cursor this store did not issue for this search.
    """
    if not isinstance(text, str) or len(text) > MAX_SEARCH_TEXT:
        raise ValidationError(
            field="text", expected=f"a string of at most {MAX_SEARCH_TEXT} characters", got=text
        )
    terms = tuple(terms_of(text))
    if not terms:
        raise ValidationError(field="text", expected="at least one word to search for", got=text)
    if len(terms) > _MAX_TERMS:
        raise ValidationError(
            field="text", expected=f"at most {_MAX_TERMS} different words", got=text
        )
    filter_labels = check_labels("labels", {} if labels is None else labels)
    session = "" if session_id is None or session_id == "" else require_id("session_id", session_id)
    size = check_limit(limit)
    canonical = msgspec.json.encode([terms, sorted(filter_labels.items()), session])
    scope_id = hashlib.blake2b(canonical, digest_size=12).hexdigest()
    key = decode_key_cursor(cursor, _SCOPE, scope_id, 1)
    before: int | None = None
    if key:
        (position,) = key
        if not position.lstrip("-").isdigit():
            raise ValidationError(
                field="cursor", expected="a position this store issued", got=cursor
            )
        before = int(position)
    return SearchQuery(
        text=text,
        terms=terms,
        labels=filter_labels,
        session_id=session,
        before=before,
        limit=size,
        scope_id=scope_id,
    )


class FoundEntry(NamedTuple):
    """An entry a backend fetched: its id and where its message is."""

    id: int
    session_id: str
    run_id: str
    seq: int
    message_index: int
    role: str
    timestamp: datetime
    body: str


def search_page(
    query: SearchQuery, fetched: Sequence[FoundEntry], *, left_out: int, complete: bool
) -> SearchPage:
    """The page of ``fetched`` (up to ``query.fetch`` matches, newest first) and its cursor."""
    found = fetched[: query.limit]
    hits = [
        SearchHit(
            session_id=e.session_id,
            run_id=e.run_id,
            record_id=str(e.seq),
            message_index=e.message_index,
            role=e.role,
            timestamp=e.timestamp,
            snippet=snippet(e.body, query.terms),
        )
        for e in found
    ]
    next_cursor = ""
    if len(fetched) > query.limit:
        next_cursor = encode_key_cursor(_SCOPE, query.scope_id, (str(found[-1].id),))
    return SearchPage(hits=hits, next_cursor=next_cursor, left_out=left_out, complete=complete)


def scope_filter(
    query: SearchQuery, table: str, *, labels_table: str, mark: str
) -> tuple[list[str], list[object]]:
    """The SQL conditions (and their parameters) keeping ``table``'s rows to the query's
    session and labels: the same text for both SQL backends, but for the session labels'
    table name and the parameter mark (``?`` or ``%s``)."""
    where: list[str] = []
    params: list[object] = []
    if query.session_id:
        where.append(f"{table}.session_id = {mark}")
        params.append(query.session_id)
    for key, value in query.labels.items():
        where.append(
            f"EXISTS (SELECT 1 FROM {labels_table} AS l WHERE l.session_id = {table}.session_id "
            f"AND l.key = {mark} AND l.value = {mark})"
        )
        params += (key, value)
    return where, params


def count_purged(plan: Plan[Any], entries: int) -> None:
    """Write into a purge's ``plan`` (its result and the receipt its tombstone keeps) how
    many search index entries the purge deletes, as the backend counted them in the
    purge's transaction."""
    receipt = plan.purge_receipt
    assert receipt is not None
    counted = msgspec.structs.replace(receipt, search_entries=entries)
    plan.purge_receipt = counted
    if isinstance(plan.result, PurgeReceipt):
        plan.result = counted
