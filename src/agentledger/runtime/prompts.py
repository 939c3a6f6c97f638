"""Which prompt versions influenced a run, derived from its records alone [D5] [V6].

A run is influenced by the prompts it rendered (``prompt_rendered``), by those
of its child runs (``child_run_linked``), by those of the runs its history was
taken from (``transcript_messages_referenced``, followed back turn by turn),
and by the prompt of each summariser that wrote a compaction summary into any
of them (``transcript_window_applied`` with a ``prompt_id``). The store keeps
no second list that could contradict the log: this reads the log.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agentledger.errors import CorruptRecordError, RunNotFoundError
from agentledger.runtime import records as rt
from agentledger.storage import payloads
from agentledger.storage.protocol import Store
from agentledger.storage.transcript_chain import ChainLink, decode_window, load_transcript_chain
from agentledger.storage.types import Record
from agentledger.storage.validation import decode_stored_payload

__all__ = ["PromptUse", "PromptVersion", "Via", "prompt_versions"]

Via = Literal["own", "child", "history", "summary"]
"""How a use was reached from the run asked about: ``own`` its own ``prompt_rendered``;
``child`` that of a run reached through a child link; ``history`` that of a run its
history (or a run on the way) was taken from; ``summary`` a summariser's prompt."""

PAGE = 500
"""Records read per ``list_run_records`` call."""


class PromptUse(msgspec.Struct, frozen=True, kw_only=True):
    """One record showing a prompt version at work: record ``record_id`` of run ``run_id``.

    ``model`` is the summariser's model for a ``summary`` use, "" otherwise.
    """

    run_id: str
    record_id: str
    via: Via
    model: str = ""


class PromptVersion(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt id and version that influenced the run, with every record that shows it."""

    prompt_id: str
    version: str
    uses: tuple[PromptUse, ...]


class _Found:
    """Uses gathered so far, grouped by (prompt id, version) in order of first use."""

    def __init__(self) -> None:
        self.uses: dict[tuple[str, str], list[PromptUse]] = {}
        self.seen: set[str] = set()

    def add(self, prompt_id: str, version: str, use: PromptUse) -> None:
        self.uses.setdefault((prompt_id, version), []).append(use)

    def result(self) -> tuple[PromptVersion, ...]:
        return tuple(
            PromptVersion(prompt_id=pid, version=version, uses=tuple(uses))
            for (pid, version), uses in self.uses.items()
        )


async def prompt_versions(store: Store, run_id: str) -> tuple[PromptVersion, ...]:
    """Every prompt id and version that influenced ``run_id``, from its records only.

    Read: the run's own records, its child runs' (recursively, through their
    links), and the runs its history was taken from (a next turn's previous
    turn, a continuation's suspended run, a fork's source through the record
    it was cut at, and so on back to the first turn), each in pages. Which runs
    the history reaches, and through which record, is the run's resolved
    transcript chain (one ``load_transcript_chain`` per run walked from: the
    run and each child). Ordered by first use in that walk (a run's records in
    log order, a child's at its link, then the runs its history came from,
    newest first); each prompt id and version once, with every record that
    used it.

    Raises:
        RunNotFoundError: no run has this id (as the store reports it).
        CorruptRecordError: a record it reads does not fit its type, a start
            carries two history references, a link or reference names a run
            the store does not have, or references form a cycle. Damage is
            reported, never skipped.
    """
    found = _Found()
    await _walk(store, found, run_id, "own", None)
    return found.result()


async def _walk(
    store: Store, found: _Found, run_id: str, via: Via, named_by: Record | None
) -> None:
    """Read ``run_id`` and the runs its history reaches (its transcript chain), each
    through its cut; a child link is followed where it stands."""
    if run_id in found.seen:
        return
    try:
        chain = await load_transcript_chain(store, run_id)
    except RunNotFoundError as e:
        if named_by is None or e.id != run_id:
            raise
        raise CorruptRecordError(
            run_id=named_by.run_id,
            record_id=named_by.id,
            reason=f"{named_by.type}: names run {run_id}, which the store does not have",
        ) from e
    for link in chain.links:
        if link.run_id in found.seen:  # reached before, and so was all it references
            continue
        found.seen.add(link.run_id)
        await _read_run(store, found, link.run_id, via if link.depth == 0 else "history", link)


async def _read_run(store: Store, found: _Found, run_id: str, via: Via, link: ChainLink) -> None:
    """Add the uses in one run's records through the link's cut."""
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=PAGE)
        for record in page.records:
            if int(record.id) > link.through:
                return
            if record.type == rt.PROMPT_RENDERED:
                prompt = _prompt(record)
                found.add(prompt.prompt_id, prompt.version, _use(record, via))
            elif record.type == payloads.TRANSCRIPT_WINDOW:
                window = decode_window(record)
                if window.prompt_id:
                    use = PromptUse(
                        run_id=run_id, record_id=record.id, via="summary", model=window.model
                    )
                    found.add(window.prompt_id, window.prompt_version, use)
            elif record.type == payloads.CHILD_RUN_LINKED:
                child = decode_stored_payload(record, payloads.ChildRunLinked)
                await _walk(store, found, child.child_run_id, "child", record)
        if not page.next_cursor:
            return
        cursor = page.next_cursor


def _prompt(record: Record) -> rt.PromptPayload:
    return rt.decode_payload(record, rt.PromptPayload)


def _use(record: Record, via: Via) -> PromptUse:
    return PromptUse(run_id=record.run_id, record_id=record.id, via=via)
