"""The search conformance cases can fail: stores with one search rule broken must not pass.

Each broken store below is a MemoryStore with one rule of search [G1] broken. The search
cases run against it in a subprocess, as a third party would run the suite, and must fail
in the tests named for that bug; the unbroken MemoryStore passes the same run (see
``test_conformance_catches_bugs.py`` for the whole suite's broken stores).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.storage import MemoryStore, search
from agentledger.storage.memory import _State
from agentledger.storage.search import SearchPage
from agentledger.storage.types import PurgeReceipt, Record
from tests.storage.test_conformance_catches_bugs import Case, Outcome, _collect, _launch

# --------------------------------------------------------------- broken stores


class _Store(MemoryStore):
    state_class: type[_State] = _State

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._state = self.state_class()


class SearchesOldestFirst(MemoryStore):
    """Hits come oldest first (and so do the pages)."""

    async def search(self, text: str, /, **kw: Any) -> SearchPage:
        page = await super().search(text, **kw)
        return msgspec.structs.replace(page, hits=page.hits[::-1])


class IgnoresSearchLabels(MemoryStore):
    """The label filter is dropped: every session's messages are found."""

    async def search(
        self, text: str, /, *, labels: Mapping[str, str] | None = None, **kw: Any
    ) -> SearchPage:
        return await super().search(text, **kw)


class _KeepsEntries(_State):
    def _purge(self, session_id: str, receipt: PurgeReceipt) -> None:
        kept = {i: self.found[i] for i in self.session_found.get(session_id, ())}
        super()._purge(session_id, receipt)
        self.found.update(kept)


class KeepsPurgedEntries(_Store):
    """A purge leaves the session's index entries: its words are still found."""

    state_class = _KeepsEntries


class _IndexesPayloads(_State):
    def _index(self, record: Record) -> None:
        if not search.index_entries(record):  # also what is not a transcript, raw
            text = record.payload.decode("utf-8", "replace")
            self.last_found += 1
            self.found[self.last_found] = search.FoundEntry(
                self.last_found, record.session_id, record.run_id, int(record.id), 0, "",
                record.timestamp, text,
            )  # fmt: skip
            self.session_found.setdefault(record.session_id, []).append(self.last_found)
        super()._index(record)


class IndexesEveryRecord(_Store):
    """Every record's payload is indexed, not only what the model sees."""

    state_class = _IndexesPayloads


class MatchesPartsOfWords(MemoryStore):
    """A word matches wherever its letters appear, inside other words too."""

    async def search(self, text: str, /, **kw: Any) -> SearchPage:
        query = search.search_query(
            text, kw.get("labels"), kw.get("session_id"), kw.get("cursor") or "",
            kw.get("limit", 50),
        )  # fmt: skip
        state = self._state
        found = [
            e for _, e in sorted(state.found.items(), reverse=True)
            if all(t in e.body.lower() for t in query.terms)
            and query.in_scope(e.session_id, state.sessions[e.session_id].labels)
            and (query.before is None or e.id < query.before)
        ]  # fmt: skip
        return search.search_page(query, found[: query.fetch], left_out=0, complete=True)


CASES = (
    Case("SearchesOldestFirst", "search", ("test_search_finds_messages_newest_first",
                                           "test_search_pages_without_gap_or_duplicate")),
    Case("IgnoresSearchLabels", "search", ("test_search_filters_by_labels_and_session",)),
    Case("KeepsPurgedEntries", "purge_removes", (
        "test_purge_removes_a_sessions_entries_and_counts_them",)),
    Case("IndexesEveryRecord", "search", (
        "test_search_never_reads_other_records_checkpoints_or_sessionless_runs",)),
    Case("MatchesPartsOfWords", "search", ("test_search_matches_whole_words_all_of_them",)),
)  # fmt: skip

SELECT = "search or purge_removes"


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    tmp_path: Path = tmp_path_factory.mktemp("search-catches-bugs")
    unbroken = _launch(tmp_path / "unbroken", {"MemoryStore": SELECT}, stores=__name__)
    broken = _launch(tmp_path / "broken", {c.store: c.select for c in CASES}, stores=__name__)
    return {**_collect(*unbroken), **_collect(*broken)}


def test_unbroken_store_passes_the_search_cases(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["MemoryStore"]
    assert outcome.returncode == 0, outcome.output[-5000:]
    assert outcome.failed == frozenset()
    assert len(outcome.passed) >= 9


@pytest.mark.parametrize("case", CASES, ids=[c.store for c in CASES])
def test_broken_store_fails_the_search_cases(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.store]
    assert outcome.returncode == 1, outcome.output[-5000:]
    missing = set(case.must_fail) - outcome.failed
    assert not missing, (
        f"{case.store} was not caught by {sorted(missing)}; failed: {sorted(outcome.failed)}"
    )
