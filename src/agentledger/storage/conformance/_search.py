"""Conformance: searching the text of transcripts across sessions [G1].

``search(text)`` finds the messages that hold every word of ``text`` (whole words, any
case), newest first, each hit naming its session, run, record and message index with a
snippet marking the match; paged by an opaque cursor bound to the search, filtered by
session labels or one session. Only model-visible text is indexed (text parts, tool
inputs and results, a compaction's summary), never other records or checkpoints, and
never a run without a session. A purge removes its session's entries and its receipt
counts them. A store that seals sessions (encryption at rest) indexes none of their
text: a search then finds nothing in them and counts them in ``left_out``; every test
here accepts either behaviour, and checks the one the store shows.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentledger.errors import SessionNotFoundError, SessionPurgedError, ValidationError
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import World
from agentledger.storage.search import SearchHit, SearchPage
from agentledger.storage.types import Checkpoint, RunStatus
from agentledger.transcript import Message, TextPart, ToolResultPart, ToolUsePart, encode_messages

__all__ = ["SearchConformance"]


def _word() -> str:
    """A word no other test writes (letters only, so every backend reads it as one word)."""
    return "zq" + "".join(chr(ord("a") + int(c, 16) % 26) for c in uuid.uuid4().hex[:12])


def _text(role: Any, text: str) -> Message:
    return Message(role=role, parts=(TextPart(text=text),))


async def _said(world: World, run: RecordBuilder, key: str, *messages: Message) -> None:
    record = run.record(
        payloads.TRANSCRIPT_APPENDED, encode_messages(messages), event_key=key, at=world.now()
    )
    await world.store.append_run_record(record)


async def _all(world: World, text: str, **kw: Any) -> list[SearchHit]:
    hits: list[SearchHit] = []
    cursor = ""
    while True:
        page = await world.store.search(text, cursor=cursor, **kw)
        hits += page.hits
        if not page.next_cursor:
            return hits
        cursor = page.next_cursor


async def _sealed(world: World, session_id: str, word: str) -> bool:
    """Whether the store left ``session_id`` (which holds ``word``) out of its index."""
    page = await world.store.search(word, session_id=session_id)
    if page.left_out:
        assert page.left_out == 1, page
        assert page.hits == [], "a sealed session's text was found: its plaintext left the seal"
        return True
    assert page.hits, f"{word!r} was written to session {session_id!r} but is not found"
    return False


def _where(hit: SearchHit) -> tuple[str, str, str, int]:
    return (hit.session_id, hit.run_id, hit.record_id, hit.message_index)


class SearchConformance(ConformanceBase):
    """[G1] search: what is found, in which order, filtered, paged, purged."""

    async def test_search_finds_messages_newest_first(self, world: World) -> None:
        word = _word()
        sid = await world.session("s")
        first = await world.root("first", session=sid)
        await _said(world, first, "m1", _text("user", f"the {word} of order 1182"))
        await _said(world, first, "m2", _text("user", "nothing here"), _text("assistant", word))
        await world.finish(first)
        second = await world.root("second", session=sid)
        await _said(world, second, "m1", _text("user", f"{word.upper()} again"))
        if await _sealed(world, sid, word):
            return
        hits = await _all(world, word)
        assert [_where(h) for h in hits] == [
            (sid, second.run.run_id, "2", 0),
            (sid, first.run.run_id, "3", 1),
            (sid, first.run.run_id, "2", 0),
        ]
        assert [h.role for h in hits] == ["user", "assistant", "user"]
        assert hits[0].snippet == f"**{word.upper()}** again"
        assert hits[2].snippet == f"the **{word}** of order 1182"
        assert hits[2].timestamp < hits[1].timestamp < hits[0].timestamp

    async def test_search_matches_whole_words_all_of_them(self, world: World) -> None:
        word, other = _word(), _word()
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _said(world, run, "m1", _text("user", f"{word} and {other}"))
        await _said(world, run, "m2", _text("user", f"{word}s {other}x only {word}"))
        if await _sealed(world, sid, word):
            return
        both = await _all(world, f"{other} {word.upper()}")
        assert [h.record_id for h in both] == ["2"]
        assert both[0].snippet == f"**{word}** and **{other}**"
        assert [h.record_id for h in await _all(world, word)] == ["3", "2"]
        assert await _all(world, word[:-1]) == [], "a part of a word matched"
        assert await _all(world, f"{word} {_word()}") == [], "a word absent from it matched"
        # Words are letters and digits; anything else separates them, on every backend.
        await _said(world, run, "m3", _text("user", f"{word}-1182 v3.14 {word}@mail.example"))
        for text in (f"{word} 1182", f"{word} 14", f"{word} mail example"):
            assert [h.record_id for h in await _all(world, text)] == ["4"], text

    async def test_search_reads_tool_inputs_results_and_summaries(self, world: World) -> None:
        asked, answered, summed = _word(), _word(), _word()
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        use = ToolUsePart(id="call-1", name="lookup", input={"query": f"{asked} please"})
        result = ToolResultPart(tool_use_id="call-1", content=f"found {answered}")
        await _said(world, run, "m1", Message(role="assistant", parts=(use,)))
        await _said(world, run, "m2", Message(role="user", parts=(result,)))
        window = payloads.TranscriptWindow(
            policy="compaction",
            start=payloads.TranscriptPosition(run_id=run.run.run_id, record="3", message=0),
            summary=f"they talked about {summed}",
        )
        record = run.record(
            payloads.TRANSCRIPT_WINDOW, window.encode(), event_key="window", at=world.now()
        )
        await world.store.append_run_record(record)
        if await _sealed(world, sid, asked):
            return
        assert [_where(h) for h in await _all(world, asked)] == [(sid, run.run.run_id, "2", 0)]
        assert [_where(h) for h in await _all(world, answered)] == [(sid, run.run.run_id, "3", 0)]
        summary = await _all(world, summed)
        assert [(h.record_id, h.role) for h in summary] == [("4", "summary")]

    async def test_search_never_reads_other_records_checkpoints_or_sessionless_runs(
        self, world: World
    ) -> None:
        word, hidden = _word(), _word()
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _said(world, run, "m1", _text("user", word))
        body = f'{{"note":"{hidden}"}}'.encode()
        await world.store.append_run_record(world.note(run, "note", body))
        checkpoint = Checkpoint(id="cp", data=f'{{"state":"{hidden}"}}'.encode())
        await world.store.record_run_suspension(run.suspension(checkpoint, at=world.now()))
        alone = await world.one_shot("alone")
        await _said(world, alone, "m1", _text("user", hidden))
        await _sealed(world, sid, word)
        page = await world.store.search(hidden)
        assert page.hits == [], "text that is not a session's transcript was indexed"

    async def test_search_filters_by_labels_and_session(self, world: World) -> None:
        word = _word()
        mine = world.id("tenant")
        a = await world.session("a", labels={"tenant": mine, "tier": "gold"})
        b = await world.session("b", labels={"tenant": mine})
        c = await world.session("c")
        for sid in (a, b, c):
            run = await world.root(f"r-{sid}", session=sid)
            await _said(world, run, "m1", _text("user", word))
        if await _sealed(world, a, word):
            page = await world.store.search(word, labels={"tenant": mine})
            assert (page.hits, page.left_out) == ([], 2)
            return
        assert [h.session_id for h in await _all(world, word)] == [c, b, a]
        assert [h.session_id for h in await _all(world, word, labels={"tenant": mine})] == [b, a]
        both = {"tenant": mine, "tier": "gold"}
        assert [h.session_id for h in await _all(world, word, labels=both)] == [a]
        assert [h.session_id for h in await _all(world, word, session_id=b)] == [b]
        assert await _all(world, word, labels={"tenant": world.id("other")}) == []
        assert (await world.store.search(word, labels={"tenant": mine})).left_out == 0

    async def test_search_pages_without_gap_or_duplicate(self, world: World) -> None:
        word = _word()
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        for i in range(7):
            await _said(world, run, f"m{i}", _text("user", f"{word} {i}"))
        if await _sealed(world, sid, word):
            return
        first = await world.store.search(word, limit=3)
        assert [h.record_id for h in first.hits] == ["8", "7", "6"]
        # Written after the first page: newer, so not on the pages that follow it.
        await _said(world, run, "late", _text("user", word))
        second = await world.store.search(word, limit=3, cursor=first.next_cursor)
        third = await world.store.search(word, limit=3, cursor=second.next_cursor)
        assert [h.record_id for h in second.hits] == ["5", "4", "3"]
        assert [h.record_id for h in third.hits] == ["2"]
        assert third.next_cursor == ""
        with pytest.raises(ValidationError) as caught:
            await world.store.search(f"{word} 1", limit=3, cursor=first.next_cursor)
        assert caught.value.field == "cursor"
        with pytest.raises(ValidationError):
            await world.store.search(word, cursor=first.next_cursor[:-2] + "xx")

    async def test_search_refuses_bad_input(self, world: World) -> None:
        for text in ("", "  ?! ", "x" * 1001):
            with pytest.raises(ValidationError) as caught:
                await world.store.search(text)
            assert caught.value.field == "text"
        for limit in (0, -1):
            with pytest.raises(ValidationError):
                await world.store.search("hello", limit=limit)
        with pytest.raises(ValidationError):
            await world.store.search("hello", labels={"": "x"})
        with pytest.raises(SessionNotFoundError):
            await world.store.search("hello", session_id=world.id("nobody"))

    async def test_purge_removes_a_sessions_entries_and_counts_them(self, world: World) -> None:
        word = _word()
        doomed = await world.session("doomed")
        kept = await world.session("kept")
        for sid in (doomed, kept):
            run = await world.root(f"r-{sid}", session=sid)
            await _said(world, run, "m1", _text("user", word), _text("assistant", f"{word}!"))
            await _said(world, run, "m2", _text("user", "no text of note"))
            await world.finish(run, RunStatus.COMPLETED)
        sealed = await _sealed(world, doomed, word)
        await world.store.end_session(doomed, ended_at=world.now())
        receipt = await world.store.purge_session(doomed)
        assert receipt.search_entries == (0 if sealed else 3)
        assert await world.store.purge_session(doomed) == receipt
        page = await world.store.search(word)
        assert doomed not in {h.session_id for h in page.hits}
        if sealed:
            assert (await world.store.search(word, session_id=kept)).left_out == 1
        else:
            assert {h.session_id for h in await _all(world, word)} == {kept}
        with pytest.raises(SessionPurgedError):
            await world.store.search(word, session_id=doomed)

    async def test_search_page_is_a_search_page(self, world: World) -> None:
        page = await world.store.search(_word())
        assert isinstance(page, SearchPage)
        assert (page.hits, page.next_cursor) == ([], "")
