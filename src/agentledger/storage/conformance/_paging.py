"""Conformance: paging a run's or a session's records [L9].

Pages come in commit order (a session's runs interleaved as committed), the
limit is positive and capped, cursors are opaque and scoped, and a page never
changes once returned.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from agentledger.errors import RunNotFoundError, SessionNotFoundError, ValidationError
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT
from agentledger.storage.types import Page, Record, RunStatus
from agentledger.storage.validation import MAX_PAGE_LIMIT

__all__ = ["PagingConformance"]


async def _pages(list_page: Any, scope_id: str, limit: int) -> list[Page]:
    """Every page of a listing, following cursors until the empty one."""
    pages: list[Page] = []
    cursor = ""
    while True:
        page: Page = await list_page(scope_id, cursor=cursor, limit=limit)
        pages.append(page)
        if not page.next_cursor:
            return pages
        assert len(pages) < 10_000, "a listing never ends"
        cursor = page.next_cursor


async def _log(world: World, run_id: str) -> list[Record]:
    return [r for p in await _pages(world.store.list_run_records, run_id, 100) for r in p.records]


def _keys(records: Any) -> list[tuple[str, str]]:
    return [(r.run_id, r.event_key) for r in records]


async def _notes(world: World, run: RecordBuilder, count: int, prefix: str = "n") -> None:
    for i in range(count):
        await world.store.append_run_record(world.note(run, f"{prefix}{i}"))


def _tampered(cursor: str) -> list[str]:
    """Spellings of a cursor that the store never issued."""
    flip = {c: ("B" if c == "A" else "A") for c in cursor}
    variants = [cursor[:i] + flip[c] + cursor[i + 1 :] for i, c in enumerate(cursor)]
    return [
        *variants,
        cursor + ".",
        "." + cursor,
        cursor[:4] + " " + cursor[4:],
        cursor + "=",
        cursor + "==",
        cursor + "\n",
        cursor[:-1],
        cursor[1:],
        cursor + cursor,
        cursor.upper() if cursor.upper() != cursor else cursor.lower(),
    ]


class PagingConformance(ConformanceBase):
    """Capability: paging records of runs and sessions."""

    # ----------------------------------------------------------------- order

    async def test_paging_run_records_page_in_commit_order(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L9] a run's pages, concatenated, are its records in commit order."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _notes(world, run, 9)
        await world.finish(run)
        pages = await _pages(other_store.list_run_records, run.run.run_id, 3)
        assert [len(p.records) for p in pages] == [3, 3, 3, 2]
        assert [p.next_cursor == "" for p in pages] == [False, False, False, True]
        records = [r for p in pages for r in p.records]
        assert [r.id for r in records] == [str(i) for i in range(1, 12)]
        assert [r.event_key for r in records] == [
            "run_started",
            *(f"n{i}" for i in range(9)),
            "run_completed",
        ]

    async def test_paging_session_records_interleave_runs_as_committed(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L9] a session's log interleaves its runs exactly in commit order."""
        sid = await world.session("s")
        noise = await world.session("noise")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        n = await world.root("n", session=noise)
        await world.store.append_run_record(world.note(a, "a1"))
        c = await world.root("c", session=sid)
        await world.store.append_run_record(world.note(n, "n1"))
        await world.store.append_run_record(world.note(c, "c1"))
        await world.store.append_run_record(world.note(b, "b1"))
        await world.store.append_run_record(world.note(a, "a2"))
        await world.finish(b)
        await world.store.append_run_record(world.note(c, "c2"))
        await world.suspend(a)
        await world.store.append_run_record(world.note(c, "c3"))
        await world.finish(c, RunStatus.FAILED)
        ra, rb, rc = a.run.run_id, b.run.run_id, c.run.run_id
        expected = [
            (ra, "run_started"),
            (rb, "run_started"),
            (ra, "a1"),
            (rc, "run_started"),
            (rc, "c1"),
            (rb, "b1"),
            (ra, "a2"),
            (rb, "run_completed"),
            (rc, "c2"),
            (ra, "run_suspended"),
            (rc, "c3"),
            (rc, "run_completed"),
        ]
        for limit in (1, 2, 5, 12, 100):
            pages = await _pages(other_store.list_session_run_records, sid, limit)
            assert _keys(r for p in pages for r in p.records) == expected, limit
        whole = await world.store.list_session_run_records(sid, limit=100)
        assert whole.next_cursor == ""
        by_key: dict[tuple[str, str], Record] = {}
        for rid in (ra, rb, rc):
            by_key.update({(r.run_id, r.event_key): r for r in await _log(world, rid)})
        assert list(whole.records) == [by_key[k] for k in expected]

    async def test_paging_session_log_holds_child_runs_and_links(self, world: World) -> None:
        """[L9] a child's records and its link on the parent join the session log in order."""
        sid = await world.session("s")
        parent = await world.root("p", session=sid, agent="parent")
        child, _ = await world.child("c", parent=parent, agent="child")
        await world.store.append_run_record(world.note(child, "c1"))
        await world.store.append_run_record(world.note(parent, "p1"))
        page = await world.store.list_session_run_records(sid, limit=100)
        rp, rc = parent.run.run_id, child.run.run_id
        assert _keys(page.records) == [
            (rp, "run_started"),
            (rp, f"child_run_linked:{rc}"),
            (rc, "run_started"),
            (rc, "c1"),
            (rp, "p1"),
        ]
        assert [r.id for r in page.records] == ["1", "2", "1", "2", "3"]

    async def test_paging_empty_session_has_one_empty_page(self, world: World) -> None:
        """[L9] a session without runs lists no records and no next cursor."""
        sid = await world.session("s")
        page = await world.store.list_session_run_records(sid)
        assert page == Page(records=(), next_cursor="")

    async def test_paging_end_of_listing_has_empty_cursor(self, world: World) -> None:
        """[L9] the last page says "" even when it is exactly full."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _notes(world, run, 3)
        first = await world.store.list_run_records(run.run.run_id, limit=2)
        assert first.next_cursor != ""
        last = await world.store.list_run_records(run.run.run_id, cursor=first.next_cursor, limit=2)
        assert [r.id for r in last.records] == ["3", "4"]
        assert last.next_cursor == ""
        session_page = await world.store.list_session_run_records(sid, limit=4)
        assert (len(session_page.records), session_page.next_cursor) == (4, "")

    # ----------------------------------------------------------------- limit

    @pytest.mark.parametrize("limit", [0, -1, -1000, True, 2.5, "10", None])
    async def test_paging_limit_must_be_a_positive_int(self, world: World, limit: Any) -> None:
        """[L9] a page limit is a positive integer; anything else is a ValidationError."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.list_run_records(run.run.run_id, limit=limit)
            assert info.value.field == "limit"
            with pytest.raises(ValidationError) as info:
                await world.store.list_session_run_records(sid, limit=limit)
            assert info.value.field == "limit"

    async def test_paging_huge_limit_is_accepted(self, world: World) -> None:
        """[L9] a limit beyond the cap is not an error; it returns what there is."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _notes(world, run, 4)
        page = await world.store.list_run_records(run.run.run_id, limit=10**9)
        assert ([r.id for r in page.records], page.next_cursor) == (["1", "2", "3", "4", "5"], "")
        page = await world.store.list_session_run_records(sid, limit=10**9)
        assert (len(page.records), page.next_cursor) == (5, "")

    async def test_paging_limit_is_capped(self, world: World) -> None:
        """[L9] one page never holds more than MAX_PAGE_LIMIT records; the default is smaller."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        rid = run.run.run_id
        await _notes(world, run, MAX_PAGE_LIMIT + 4)
        first = await world.store.list_run_records(rid, limit=10**9)
        assert len(first.records) == MAX_PAGE_LIMIT
        assert first.records[-1].id == str(MAX_PAGE_LIMIT)
        assert first.next_cursor != ""
        rest = await world.store.list_run_records(rid, cursor=first.next_cursor, limit=10**9)
        assert [r.id for r in rest.records] == [str(MAX_PAGE_LIMIT + i) for i in range(1, 6)]
        assert rest.next_cursor == ""
        default = await world.store.list_run_records(rid)
        assert len(default.records) == DEFAULT_PAGE_LIMIT
        session_first = await world.store.list_session_run_records(sid, limit=MAX_PAGE_LIMIT + 1)
        assert len(session_first.records) == MAX_PAGE_LIMIT

    # --------------------------------------------------------------- cursors

    @pytest.mark.parametrize(
        "cursor",
        ["x", "not a cursor", "0", "1", "-1", "=", "====", "AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "\x00"],
    )
    async def test_paging_forged_cursor_is_refused(self, world: World, cursor: str) -> None:
        """[L9] a cursor the store did not issue is a ValidationError, never a jump."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.list_run_records(run.run.run_id, cursor=cursor)
            assert info.value.field == "cursor"
            with pytest.raises(ValidationError) as info:
                await world.store.list_session_run_records(sid, cursor=cursor)
            assert info.value.field == "cursor"

    async def test_paging_plausible_forgeries_are_refused(self, world: World) -> None:
        """[L9] base64 of a hand-made position is not a cursor."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        rid = run.run.run_id
        forged = [
            base64.urlsafe_b64encode(body).decode().rstrip("=")
            for body in (
                f"run\x00{rid}\x001".encode(),
                f"run\x00{rid}\x001".encode() + b"\x00" * 8,
                b"1",
                f'{{"run":"{rid}","position":1}}'.encode(),
            )
        ]
        async with world.unchanged():
            for cursor in forged:
                with pytest.raises(ValidationError) as info:
                    await world.store.list_run_records(rid, cursor=cursor)
                assert info.value.field == "cursor"

    async def test_paging_tampered_cursor_is_refused(self, world: World) -> None:
        """[L9] clients hand a cursor back unchanged: any altered spelling is refused."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        rid = run.run.run_id
        await _notes(world, run, 4)
        run_cursor = (await world.store.list_run_records(rid, limit=2)).next_cursor
        session_cursor = (await world.store.list_session_run_records(sid, limit=2)).next_cursor
        assert run_cursor
        assert session_cursor
        async with world.unchanged():
            for bad in _tampered(run_cursor):
                assert bad != run_cursor
                with pytest.raises(ValidationError) as info:
                    await world.store.list_run_records(rid, cursor=bad, limit=2)
                assert info.value.field == "cursor", bad
            for bad in _tampered(session_cursor):
                assert bad != session_cursor
                with pytest.raises(ValidationError) as info:
                    await world.store.list_session_run_records(sid, cursor=bad, limit=2)
                assert info.value.field == "cursor", bad

    async def test_paging_cursor_of_one_run_is_refused_on_another(self, world: World) -> None:
        """[L9] a cursor is scoped to the run that issued it."""
        sid = await world.session("s")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        await _notes(world, a, 3)
        await _notes(world, b, 3)
        cursor = (await world.store.list_run_records(a.run.run_id, limit=2)).next_cursor
        assert cursor
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.list_run_records(b.run.run_id, cursor=cursor, limit=2)
        assert info.value.field == "cursor"

    async def test_paging_cursor_is_refused_across_scopes(self, world: World) -> None:
        """[L9] run cursors fail on sessions; session cursors fail on runs and other sessions."""
        sid = await world.session("s")
        other = await world.session("other")
        run = await world.root("r", session=sid)
        await _notes(world, run, 3)
        await _notes(world, await world.root("o", session=other), 3)
        run_cursor = (await world.store.list_run_records(run.run.run_id, limit=2)).next_cursor
        session_cursor = (await world.store.list_session_run_records(sid, limit=2)).next_cursor
        assert run_cursor
        assert session_cursor
        async with world.unchanged():
            with pytest.raises(ValidationError):
                await world.store.list_session_run_records(sid, cursor=run_cursor, limit=2)
            with pytest.raises(ValidationError):
                await world.store.list_run_records(run.run.run_id, cursor=session_cursor, limit=2)
            with pytest.raises(ValidationError):
                await world.store.list_session_run_records(other, cursor=session_cursor, limit=2)

    async def test_paging_cursor_works_on_another_handle(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L9] a cursor names a position in the data, so any handle on the database takes it."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await _notes(world, run, 5)
        rid = run.run.run_id
        first = await world.store.list_run_records(rid, limit=2)
        here = await world.store.list_run_records(rid, cursor=first.next_cursor, limit=2)
        there = await other_store.list_run_records(rid, cursor=first.next_cursor, limit=2)
        assert [r.id for r in there.records] == ["3", "4"]
        assert there.records == here.records

    # ----------------------------------------------------------- stability

    async def test_paging_run_page_never_changes_once_returned(self, world: World) -> None:
        """[L9] re-reading from an earlier cursor after more appends gives the same records."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        rid = run.run.run_id
        await _notes(world, run, 4)
        first = await world.store.list_run_records(rid, limit=2)
        second = await world.store.list_run_records(rid, cursor=first.next_cursor, limit=2)
        await _notes(world, run, 4, prefix="m")
        again_first = await world.store.list_run_records(rid, limit=2)
        again_second = await world.store.list_run_records(rid, cursor=first.next_cursor, limit=2)
        assert again_first.records == first.records
        assert again_second.records == second.records
        assert [r.event_key for r in again_second.records] == ["n1", "n2"]
        tail = await world.store.list_run_records(rid, cursor=second.next_cursor, limit=100)
        assert [r.event_key for r in tail.records] == ["n3", "m0", "m1", "m2", "m3"]

    async def test_paging_session_page_never_changes_once_returned(self, world: World) -> None:
        """[L9] a session page read earlier stays the same while its runs keep writing."""
        sid = await world.session("s")
        a = await world.root("a", session=sid)
        b = await world.root("b", session=sid)
        await world.store.append_run_record(world.note(a, "a1"))
        first = await world.store.list_session_run_records(sid, limit=2)
        second = await world.store.list_session_run_records(sid, cursor=first.next_cursor, limit=2)
        assert _keys(second.records) == [(a.run.run_id, "a1")]
        await world.root("c", session=sid)
        await world.store.append_run_record(world.note(b, "b1"))
        await world.finish(a)
        again = await world.store.list_session_run_records(sid, cursor=first.next_cursor, limit=2)
        assert again.records[:1] == second.records
        assert _keys(again.records)[1][1] == "run_started"
        assert (await world.store.list_session_run_records(sid, limit=2)).records == first.records

    async def test_paging_pages_stay_stable_under_concurrent_writes(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[L9] pages read while two handles write read back the same once writes settle."""
        sid = await world.session("s")
        runs = [await world.root(name, session=sid) for name in ("a", "b", "c")]
        seen: dict[tuple[str, int], tuple[Record, ...]] = {}
        done = asyncio.Event()

        async def write(handle: AdminStore, tag: str) -> None:
            for i in range(24):
                run = runs[i % len(runs)]
                await handle.append_run_record(world.note(run, f"{tag}{i}"))
                await asyncio.sleep(0)

        async def read() -> None:
            while not done.is_set():
                cursor = ""
                while True:
                    page = await world.store.list_session_run_records(sid, cursor=cursor, limit=4)
                    seen[(cursor, len(page.records))] = page.records
                    if not page.next_cursor:
                        break
                    cursor = page.next_cursor
                await asyncio.sleep(0)

        async def writers() -> None:
            await asyncio.gather(write(world.store, "x"), write(other_store, "y"))
            done.set()

        await asyncio.gather(writers(), read())
        assert seen
        for (cursor, _), records in seen.items():
            again = await world.store.list_session_run_records(sid, cursor=cursor, limit=4)
            assert again.records[: len(records)] == records, cursor
        final = [
            r for p in await _pages(world.store.list_session_run_records, sid, 7) for r in p.records
        ]
        assert len(final) == 3 + 48
        assert len({(r.run_id, r.event_key) for r in final}) == len(final)
        for run in runs:
            ids = [int(r.id) for r in final if r.run_id == run.run.run_id]
            assert ids == list(range(1, len(ids) + 1))

    async def test_paging_sessionless_runs_stay_out_of_session_logs(self, world: World) -> None:
        """[L9] a one-shot run's records are in its own log only."""
        sid = await world.session("s")
        await world.root("r", session=sid)
        lone = await world.one_shot("lone")
        await _notes(world, lone, 2)
        page = await world.store.list_session_run_records(sid, limit=100)
        assert {r.run_id for r in page.records} == {world.id("r")}
        assert len((await world.store.list_run_records(lone.run.run_id)).records) == 3

    # ------------------------------------------------------------- not found

    async def test_paging_unknown_run_is_not_found(self, world: World) -> None:
        """[L9] listing a run that was never started is RunNotFoundError."""
        rid = world.id("ghost")
        async with world.unchanged():
            with pytest.raises(RunNotFoundError) as info:
                await world.store.list_run_records(rid)
        assert info.value.run_id == rid

    async def test_paging_unknown_session_is_not_found(self, world: World) -> None:
        """[L9] listing a session that was never created is SessionNotFoundError."""
        sid = world.id("ghost")
        async with world.unchanged():
            with pytest.raises(SessionNotFoundError) as info:
                await world.store.list_session_run_records(sid)
        assert info.value.session_id == sid
