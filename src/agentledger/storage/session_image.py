"""The whole logical content of one session, read through the public API, and its digests.

A :class:`SessionImage` is what a purge deletes [D7], what an archive carries
and what a restore writes back [A1]. Its digests are computed over one
canonical encoding, so a purge receipt and an archive of the same session
carry the same ``sha256:`` values.

The canonical encoding (version ``agentledger.session-image/1``) is msgspec
JSON with ``order="sorted"``: struct fields and dict keys in sorted order,
``bytes`` as standard base64, datetimes as RFC 3339 in UTC (``Z``), no
whitespace. A run's digest is the sha256 of the encoding of::

    {"checkpoint": <Checkpoint or null>, "format": "agentledger.session-image/1",
     "records": [<the run's records in session order>], "run": <RunMeta>}

and the session's digest is the sha256 of the encoding of::

    {"format": "agentledger.session-image/1", "order": [[run_id, record_id], ...],
     "runs": [[run_id, run_digest], ...], "session": <Session>}

where ``runs`` is in session (start) order and ``order`` is how the session's
records interleave across its runs. A session holding submitted messages
(version ``agentledger.session-image/2``) adds ``"messages": [<SessionMessage>,
...]`` in arrival order and names that version in ``format``; a session without
any encodes exactly as version 1 did, so the digests of older archives and
purge receipts stay what they were. Any change to any byte of any field of
the session, a run, a record, a checkpoint or a message changes the session digest.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Protocol

import msgspec

from agentledger.errors import SuspensionNotFoundError
from agentledger.storage.types import (
    Checkpoint,
    Page,
    Record,
    RunMeta,
    Session,
    SessionMessage,
)
from agentledger.storage.validation import MAX_PAGE_LIMIT

__all__ = [
    "IMAGE_FORMAT",
    "MESSAGES_IMAGE_FORMAT",
    "SessionImage",
    "SessionImageSource",
    "image_byte_total",
    "image_message_bytes",
    "read_session_image",
    "run_digest",
    "session_digest",
]

IMAGE_FORMAT = "agentledger.session-image/1"
MESSAGES_IMAGE_FORMAT = "agentledger.session-image/2"
"""The version of an image that holds submitted messages (its session digest covers them)."""


class SessionImage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One session's whole logical content: what a purge deletes and a restore writes.

    ``runs`` are in session (start) order; ``records`` are every record of
    those runs in ``list_session_run_records`` order, ids set; ``checkpoints``
    maps a run id to the suspension checkpoint of each run that has one;
    ``messages`` are the messages submitted to the session, started or still
    waiting, in arrival order (an image from before messages has none).
    One-shot runs never belong to a session, so never to an image.
    """

    session: Session
    runs: list[RunMeta]
    records: list[Record]
    checkpoints: dict[str, Checkpoint] = msgspec.field(default_factory=dict)
    messages: list[SessionMessage] = msgspec.field(default_factory=list)


class SessionImageSource(Protocol):
    """The public reads an image is built from (any ``Store`` that is a ``SessionAdmin``)."""

    async def load_session(self, session_id: str, /) -> Session: ...

    async def list_runs_by_session(self, session_id: str, /) -> list[RunMeta]: ...

    async def list_session_run_records(
        self, session_id: str, /, cursor: str = "", limit: int = ...
    ) -> Page: ...

    async def load_run_suspension(self, run_id: str, /) -> Checkpoint: ...

    async def list_session_messages(self, session_id: str, /) -> list[SessionMessage]: ...


async def read_session_image(store: SessionImageSource, session_id: str) -> SessionImage:
    """Read one session through the public API, paging its records to the end.

    The reads are separate calls, so the image is consistent only for a
    session nothing writes to any more (an ended one with no running run).
    """
    session = await store.load_session(session_id)
    runs = await store.list_runs_by_session(session_id)
    records: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_session_run_records(session_id, cursor=cursor, limit=MAX_PAGE_LIMIT)
        records.extend(page.records)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    checkpoints: dict[str, Checkpoint] = {}
    for run in runs:
        with contextlib.suppress(SuspensionNotFoundError):  # never suspended
            checkpoints[run.run_id] = await store.load_run_suspension(run.run_id)
    messages = await store.list_session_messages(session_id)
    return SessionImage(
        session=session, runs=runs, records=records, checkpoints=checkpoints, messages=messages
    )


def _canonical(value: Any) -> bytes:
    return msgspec.json.encode(value, order="sorted")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _run_digest(image: SessionImage, run: RunMeta, records: list[Record]) -> str:
    return _sha256(
        _canonical(
            {
                "format": IMAGE_FORMAT,
                "run": run,
                "records": records,
                "checkpoint": image.checkpoints.get(run.run_id),
            }
        )
    )


def _records_by_run(image: SessionImage) -> dict[str, list[Record]]:
    by_run: dict[str, list[Record]] = {run.run_id: [] for run in image.runs}
    for record in image.records:
        by_run.setdefault(record.run_id, []).append(record)
    return by_run


def run_digest(image: SessionImage, run_id: str) -> str:
    """``sha256:<hex>`` of one run of the image: its meta, records and checkpoint.

    A ``KeyError`` if the image has no run ``run_id``.
    """
    for run in image.runs:
        if run.run_id == run_id:
            records = [r for r in image.records if r.run_id == run_id]
            return _run_digest(image, run, records)
    raise KeyError(run_id)


def session_digest(image: SessionImage) -> str:
    """``sha256:<hex>`` of the whole image: the session, each run's digest, the record
    order and the session's messages (when it has any)."""
    by_run = _records_by_run(image)
    whole: dict[str, Any] = {
        "format": IMAGE_FORMAT,
        "session": image.session,
        "runs": [[run.run_id, _run_digest(image, run, by_run[run.run_id])] for run in image.runs],
        "order": [[r.run_id, r.id] for r in image.records],
    }
    if image.messages:
        whole["format"] = MESSAGES_IMAGE_FORMAT
        whole["messages"] = image.messages
    return _sha256(_canonical(whole))


def image_byte_total(image: SessionImage) -> int:
    """The bytes the image holds: every record payload plus every checkpoint's data."""
    return sum(len(r.payload) for r in image.records) + sum(
        len(c.data) for c in image.checkpoints.values()
    )


def image_message_bytes(image: SessionImage) -> int:
    """The bytes of the image's submitted messages (the JSON of each)."""
    return sum(len(m.message) for m in image.messages)
