"""Conformance: session labels and the paged session listing [D6].

Labels are fixed when a session is created: an exact retry repeats them, a
retry with other labels is a :class:`~agentledger.errors.SessionConflictError`
and changes nothing. ``list_sessions`` pages newest first (``created_at``,
then id, descending) with an opaque cursor bound to its filter.

Tests share one database, so each test labels its sessions with its own
namespace (``{"world": world.ns}``) and lists through that filter.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from agentledger.errors import (
    ConflictError,
    SessionConflictError,
    SessionEndedError,
    SessionNotFoundError,
    ValidationError,
)
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._races import assert_losers, race, split
from agentledger.storage.conformance._world import AdminStore, World, all_sessions
from agentledger.storage.types import Session, SessionPage, SessionStatus

__all__ = ["SessionListingConformance"]

_T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _at(ms: int) -> datetime:
    return _T0 + timedelta(milliseconds=ms)


def _mine(world: World, **more: str) -> dict[str, str]:
    """This test's namespace label, plus ``more``."""
    return {"world": world.ns, **more}


async def _ids(
    store: AdminStore, world: World, *statuses: SessionStatus, **labels: str
) -> list[str]:
    """Ids of this world's sessions listed with these filters, in listing order."""
    return [s.id for s in await all_sessions(store, statuses, _mine(world, **labels), limit=2)]


class SessionListingConformance(ConformanceBase):
    """Capability: session labels, and listing sessions newest first, filtered and paged."""

    # ---------------------------------------------------------------- labels

    async def test_labels_round_trip(self, world: World, other_store: AdminStore) -> None:
        """[D6] labels given at creation come back from create, load and list, on every handle."""
        sid = world.track_session("s")
        labels = _mine(world, tenant="acme", note="", unicode="é✓ 🚀", spaced="a b=c")
        created = await world.store.create_session(sid, created_at=world.now(), labels=labels)
        assert created.labels == labels
        assert (await world.store.load_session(sid)).labels == labels
        assert await other_store.load_session(sid) == created
        (listed,) = (await other_store.list_sessions(labels={"world": world.ns})).sessions
        assert listed == created
        ended = await other_store.end_session(sid, ended_at=world.now())
        assert ended.labels == labels  # ending keeps them

    async def test_a_session_without_labels_has_none(self, world: World) -> None:
        """[D6] labels default to empty, and an empty mapping is the same as none."""
        a = world.track_session("a")
        b = world.track_session("b")
        assert (await world.store.create_session(a, created_at=world.now())).labels == {}
        assert (await world.store.create_session(b, created_at=world.now(), labels={})).labels == {}
        assert (await world.store.load_session(a)).labels == {}
        async with world.unchanged():
            assert (await world.store.create_session(a, created_at=world.now(), labels={})).id == a
            assert (await world.store.create_session(b, created_at=world.now())).id == b

    async def test_retry_with_the_same_labels_returns_the_session(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D4] [D6] an exact retry (labels in any order) returns the stored session unchanged."""
        sid = world.track_session("s")
        labels = _mine(world, a="1", b="2")
        first = await world.store.create_session(sid, created_at=world.now(), labels=labels)
        reordered = dict(reversed(list(labels.items())))
        async with world.unchanged():
            again = await other_store.create_session(sid, created_at=world.now(), labels=reordered)
        assert again == first

    async def test_retry_with_other_labels_is_a_conflict(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D6] [X3] a retry whose labels differ in any way is refused and changes nothing."""
        sid = world.track_session("s")
        labels = _mine(world, tenant="acme")
        at = world.now()
        await world.store.create_session(sid, created_at=at, labels=labels)
        for other in (
            _mine(world, tenant="other"),  # another value
            _mine(world, tenant="acme", extra="x"),  # one more
            _mine(world),  # one fewer
            {},  # none
        ):
            for store in (world.store, other_store):
                async with world.unchanged():
                    with pytest.raises(SessionConflictError) as e:
                        await store.create_session(sid, created_at=at, labels=other)
                assert isinstance(e.value, ConflictError)
                assert (e.value.session_id, e.value.run_id, e.value.field) == (sid, "", "labels")
                assert (e.value.expected, e.value.got) == (labels, other)
        async with world.unchanged():
            with pytest.raises(SessionConflictError):
                await world.store.create_session(sid)  # omitted labels are no labels
        assert (await other_store.load_session(sid)).labels == labels

    async def test_an_ended_session_stays_ended_whatever_the_labels(self, world: World) -> None:
        """[D4] [D6] creating an ended session again is SessionEndedError, labels or not."""
        sid = await world.session("s", labels=_mine(world))
        await world.store.end_session(sid, ended_at=world.now())
        for labels in (_mine(world), _mine(world, other="x")):
            async with world.unchanged():
                with pytest.raises(SessionEndedError):
                    await world.store.create_session(sid, created_at=world.now(), labels=labels)

    async def test_labels_are_validated(self, world: World) -> None:
        """[D6] labels must be storable str -> str text within limits; nothing is created."""
        sid = world.track_session("s")
        cases: list[Any] = [
            ["tenant", "acme"],  # not a mapping
            {"tenant": 1},  # not a string value
            {1: "x"},  # not a string key
            {"": "x"},  # empty key
            {"k" * 257: "x"},  # key too long
            {"k": "v" * 1025},  # value too long
            {f"k{i}": "v" for i in range(65)},  # too many
            {"k": "a\x00b"},  # NUL cannot be stored everywhere
            {"\ud800": "x"},  # lone surrogate
        ]
        for labels in cases:
            async with world.unchanged():
                with pytest.raises(ValidationError) as e:
                    await world.store.create_session(sid, created_at=world.now(), labels=labels)
            assert e.value.field == "labels", labels
        with pytest.raises(SessionNotFoundError):
            await world.store.load_session(sid)
        longest = {"k" * 256: "v" * 1024, **{f"k{i}": "" for i in range(63)}}
        created = await world.store.create_session(sid, created_at=world.now(), labels=longest)
        assert created.labels == longest

    async def test_race_creates_with_different_labels(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[D6] [X5] concurrent creates of one session with different labels: exactly one wins."""
        sid = world.track_session("s")
        at = world.now()
        handles = [store if i % 2 == 0 else other_store for i in range(self.race_writers)]
        results = await race(
            [
                h.create_session(sid, created_at=at, labels=_mine(world, writer=str(i)))
                for i, h in enumerate(handles)
            ]
        )
        wins, losses = split(results, Session)
        assert len(wins) == 1, results
        assert_losers(losses, SessionConflictError)
        winner, session = wins[0]
        assert session.labels == _mine(world, writer=str(winner))
        assert await other_store.load_session(sid) == session

    # ------------------------------------------------------------ created_at

    async def test_omitted_created_at_is_the_store_clock(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D6] without ``created_at`` the store uses now, UTC, truncated to milliseconds."""
        sid = world.track_session("s")
        before = datetime.now(UTC) - timedelta(milliseconds=1)
        created = await world.store.create_session(sid, labels=_mine(world))
        after = datetime.now(UTC)
        assert before <= created.created_at <= after
        assert created.created_at.microsecond % 1000 == 0
        assert created.created_at.utcoffset() == timedelta(0)
        assert await other_store.load_session(sid) == created

    async def test_a_retry_keeps_the_first_created_at(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D4] [D6] a retry omitting or changing ``created_at`` returns the stored session;
        only the labels are compared."""
        sid = world.track_session("omitted-first")
        first = await world.store.create_session(sid, labels=_mine(world))
        given = world.track_session("given-first")
        at = world.now()
        stored = await world.store.create_session(given, created_at=at, labels=_mine(world))
        async with world.unchanged():
            assert await other_store.create_session(sid, labels=_mine(world)) == first
            again = await other_store.create_session(sid, created_at=at, labels=_mine(world))
            assert again == first
            assert await other_store.create_session(given, labels=_mine(world)) == stored
            with pytest.raises(SessionConflictError):
                await other_store.create_session(sid, labels=_mine(world, other="x"))

    # ----------------------------------------------------------------- order

    async def test_list_sessions_by_created_at_then_id(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D6] sessions list by ``created_at`` descending, not in the order they were created;
        equal times list by id descending."""
        labels = _mine(world)
        middle = await world.session("middle", labels=labels, at=_at(20))
        oldest = await world.session("oldest", labels=labels, at=_at(10))
        newest = await world.session("newest", labels=labels, at=_at(30))
        tie_a = await world.session("tie-a", labels=labels, at=_at(15))
        tie_b = await world.session("tie-b", labels=labels, at=_at(15))
        expected = [newest, middle, tie_b, tie_a, oldest]
        for store in (world.store, other_store):
            page = await store.list_sessions(labels=labels)
            assert isinstance(page, SessionPage)
            assert [s.id for s in page.sessions] == expected
            assert page.next_cursor == ""
            assert page.sessions == [await store.load_session(sid) for sid in expected]
        unfiltered = await all_sessions(world.store, limit=1000)
        assert [s.id for s in unfiltered if s.id in set(expected)] == expected
        keys = [(s.created_at, s.id) for s in unfiltered]
        assert keys == sorted(keys, reverse=True)

    async def test_list_order_holds_for_any_time_and_any_id(self, world: World) -> None:
        """[D6] times before 1970 and far ahead, and ids tied on time, compare the same in every
        backend: time, then id in code-point order (UTF-8 byte order), both descending."""
        labels = _mine(world)
        times = {
            "year-1": datetime(1, 1, 1, tzinfo=UTC),
            "before-epoch": datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
            "epoch": datetime(1970, 1, 1, tzinfo=UTC),
            "year-9999": datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        }
        for name, at in times.items():
            await world.session(name, labels=labels, at=at)
        tied = ["Z", "a", "z", "é", "\uff5a", "😀", "a b", "a-b"]
        for name in tied:
            await world.session(f"tie {name}", labels=labels, at=_at(0))
        expected = [
            world.id("year-9999"),
            *sorted((world.id(f"tie {name}") for name in tied), reverse=True),
            world.id("epoch"),
            world.id("before-epoch"),
            world.id("year-1"),
        ]
        seen: list[str] = []
        cursor = ""
        while True:
            page = await world.store.list_sessions(labels=labels, cursor=cursor, limit=1)
            seen.extend(s.id for s in page.sessions)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        assert seen == expected
        assert (await world.store.load_session(world.id("year-1"))).created_at == times["year-1"]

    async def test_paging_has_no_gap_and_no_duplicate(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D6] paging through many sessions returns each once, newest first; sessions
        created or purged between pages do not shift the rest."""
        labels = _mine(world)
        ids = [await world.session(f"s{i:02}", labels=labels, at=_at(i // 2)) for i in range(23)]
        expected = sorted(ids, key=lambda sid: (_at(ids.index(sid) // 2), sid), reverse=True)
        seen: list[str] = []
        pages = 0
        cursor = ""
        while True:
            store = world.store if pages % 2 == 0 else other_store
            page = await store.list_sessions(labels=labels, cursor=cursor, limit=4)
            assert len(page.sessions) <= 4
            seen.extend(s.id for s in page.sessions)
            pages += 1
            if pages == 2:  # between pages: a newer session, and one not yet listed is purged
                await world.session("late", labels=labels, at=_at(100))
                gone = expected[12]
                await world.store.end_session(gone, ended_at=world.now())
                await world.store.purge_session(gone)
                expected.remove(gone)
            if not page.next_cursor:
                break
            assert len(page.sessions) == 4
            cursor = page.next_cursor
        assert seen == expected
        assert pages == 6
        assert await _ids(world.store, world) == [world.id("late"), *expected]

    async def test_an_exact_page_end_has_no_cursor(self, world: World) -> None:
        """[D6] when the last page is exactly full, its ``next_cursor`` is already empty."""
        labels = _mine(world)
        for i in range(4):
            await world.session(f"s{i}", labels=labels)
        first = await world.store.list_sessions(labels=labels, limit=2)
        assert first.next_cursor != ""
        second = await world.store.list_sessions(labels=labels, cursor=first.next_cursor, limit=2)
        assert len(second.sessions) == 2
        assert second.next_cursor == ""
        nothing = await world.store.list_sessions(labels=_mine(world, absent="x"))
        assert nothing == SessionPage(sessions=[], next_cursor="")

    # --------------------------------------------------------------- filters

    async def test_list_sessions_filters_by_status_and_labels(self, world: World) -> None:
        """[D6] a status filter keeps those statuses; a label filter keeps sessions carrying
        every given label with its value; both together keep what passes both."""
        gold = await world.session("gold", labels=_mine(world, tenant="acme", tier="gold"))
        acme = await world.session("acme", labels=_mine(world, tenant="acme"))
        other = await world.session("other", labels=_mine(world, tenant="other"))
        plain = await world.session("plain", labels=_mine(world))
        await world.store.end_session(acme, ended_at=world.now())
        await world.store.end_session(plain, ended_at=world.now())
        active, ended = SessionStatus.ACTIVE, SessionStatus.ENDED
        assert await _ids(world.store, world) == [plain, other, acme, gold]
        assert await _ids(world.store, world, active) == [other, gold]
        assert await _ids(world.store, world, ended) == [plain, acme]
        assert await _ids(world.store, world, active, ended) == [plain, other, acme, gold]
        assert await _ids(world.store, world, tenant="acme") == [acme, gold]
        assert await _ids(world.store, world, tenant="acme", tier="gold") == [gold]
        assert await _ids(world.store, world, tier="gold", tenant="other") == []
        assert await _ids(world.store, world, tenant="acm") == []  # whole values only
        assert await _ids(world.store, world, tenant="") == []  # "" is a value, not "any"
        assert await _ids(world.store, world, ended, tenant="acme") == [acme]
        assert await _ids(world.store, world, active, tenant="acme") == [gold]

    async def test_random_filters_and_cursors_list_what_the_filter_defines(
        self, world: World, other_store: AdminStore
    ) -> None:
        """[D6] on random label sets, statuses, limits and cursors (some sessions ended,
        some purged, times tied), every page lists exactly the sessions the filter keeps,
        newest first: whatever index a backend pages from, it agrees with the sessions."""
        rng = random.Random(27)
        keys = [f"{world.ns}-{name}" for name in ("a", "b", "c")]
        sessions: dict[str, Session] = {}
        for i in range(40):
            labels = {key: rng.choice("xy") for key in keys if rng.random() < 0.6}
            sid = await world.session(f"s{i:02}", labels=labels, at=_at(rng.randrange(12)))
            sessions[sid] = await world.store.load_session(sid)
        for sid in rng.sample(sorted(sessions), 16):
            sessions[sid] = await world.store.end_session(sid, ended_at=world.now())
        for sid in rng.sample(sorted(s.id for s in sessions.values() if s.ended_at), 4):
            await world.store.purge_session(sid)
            del sessions[sid]
        statuses = ((), (SessionStatus.ACTIVE,), (SessionStatus.ENDED,), tuple(SessionStatus))
        for round_ in range(30):
            wanted = rng.choice(statuses)
            chosen = rng.sample(keys, rng.randrange(1, 4))
            labels = {key: rng.choice("xyz" if round_ % 5 == 0 else "xy") for key in chosen}
            expected = [
                s.id
                for s in sorted(sessions.values(), key=lambda s: (s.created_at, s.id), reverse=True)
                if (not wanted or s.status in wanted)
                and all(s.labels.get(k) == v for k, v in labels.items())
            ]
            limit = rng.randrange(1, 6)
            seen: list[str] = []
            cursor = ""
            while True:
                store = rng.choice((world.store, other_store))
                page = await store.list_sessions(wanted, labels=labels, cursor=cursor, limit=limit)
                assert all(sessions[s.id] == s for s in page.sessions)
                seen.extend(s.id for s in page.sessions)
                if not page.next_cursor:
                    break
                assert len(page.sessions) == limit
                cursor = page.next_cursor
            assert seen == expected, (wanted, labels, limit)
        for wanted in statuses:
            listed = [s.id for s in await all_sessions(world.store, wanted) if s.id in sessions]
            assert listed == [
                s.id
                for s in sorted(sessions.values(), key=lambda s: (s.created_at, s.id), reverse=True)
                if not wanted or s.status in wanted
            ]

    async def test_list_sessions_checks_its_filter(self, world: World) -> None:
        """[D6] a malformed status or label filter is a ValidationError."""
        await world.session("s", labels=_mine(world))
        for statuses, labels, field in (
            (["purged"], {}, "statuses"),
            ("active", {}, "statuses"),
            ((), ["world"], "labels"),
            ((), {"world": 1}, "labels"),
            ((), {"": "x"}, "labels"),
            ((), {"k": "\x00"}, "labels"),
        ):
            with pytest.raises(ValidationError) as e:
                await world.store.list_sessions(cast(Any, statuses), labels=cast(Any, labels))
            assert e.value.field == field

    # ---------------------------------------------------------------- cursor

    async def test_cursor_is_bound_to_its_filter(self, world: World) -> None:
        """[D6] a cursor only continues the listing that issued it; limits may change."""
        labels = _mine(world, tenant="acme")
        for i in range(3):
            await world.session(f"s{i}", labels=labels)
        active = (SessionStatus.ACTIVE,)
        page = await world.store.list_sessions(active, labels=labels, limit=1)
        cursor = page.next_cursor
        assert cursor
        for statuses, other in (
            ((), labels),  # no status filter
            ((SessionStatus.ENDED,), labels),
            (active, _mine(world)),  # fewer labels
            (active, _mine(world, tenant="other")),
            (active, {}),
            ((), {}),
        ):
            with pytest.raises(ValidationError) as e:
                await world.store.list_sessions(statuses, labels=other, cursor=cursor)
            assert e.value.field == "cursor"
        same = (SessionStatus.ACTIVE, SessionStatus.ACTIVE)  # the same filter spelled otherwise
        rest = await world.store.list_sessions(same, labels=dict(labels), cursor=cursor, limit=5)
        assert [s.id for s in rest.sessions] == [world.id("s1"), world.id("s0")]

    async def test_invalid_cursor_or_limit_is_refused(self, world: World) -> None:
        """[D6] a cursor the store never issued for sessions, or a bad limit, is refused."""
        sid = await world.session("s", labels=_mine(world))
        run = await world.root("r", session=sid)
        for i in range(3):
            await world.store.append_run_record(world.note(run, f"n{i}"))
        records_cursor = (await world.store.list_run_records(run.run.run_id, limit=1)).next_cursor
        page = await world.store.list_sessions(labels=_mine(world), limit=1)
        assert page.next_cursor == ""
        for index in range(2):
            await world.session(f"more{index}", labels=_mine(world))
        good = (await world.store.list_sessions(labels=_mine(world), limit=1)).next_cursor
        for bad in ("x", "!!!", records_cursor, good[:-2], good + "A", good.upper(), 7):
            with pytest.raises(ValidationError) as e:
                await world.store.list_sessions(labels=_mine(world), cursor=cast(Any, bad))
            assert e.value.field == "cursor", bad
        for limit in (0, -1, True, "10", 1.5):
            with pytest.raises(ValidationError) as e:
                await world.store.list_sessions(labels=_mine(world), limit=cast(Any, limit))
            assert e.value.field == "limit", limit
