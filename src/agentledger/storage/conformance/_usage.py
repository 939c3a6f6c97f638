"""Conformance: accounting [G3], the counters a store keeps as records are written.

A session's and a run's usage (bytes, records, runs, tokens) must equal what a
count of their stored records gives, after starts, appends, batches, children,
refused writes and exact retries (neither adds anything); the totals per label
add up the sessions carrying it, grouped by one label or for one label's value, through
appends, imports, forks, purges and cascading purges; a purge takes the session's
counters with it.
Bytes are the payload bytes as stored: equal to the plaintext for a store that
does not seal payloads, more for one that does.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest

from agentledger.errors import RecordConflictError, SessionPurgedError, ValidationError
from agentledger.storage.accounting import MODEL_USAGE, UsageTotals, add, record_tokens
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.derivation import HISTORY_COPIED, CopiedFrom
from agentledger.storage.session_image import SessionImage, read_session_image
from agentledger.storage.types import Record, RunStatus

__all__ = ["UsageConformance"]


def _usage_record(world: World, run: RecordBuilder, key: str, i: int, o: int, c: int) -> Record:
    body = msgspec.json.encode(
        {"model": "m", "input_tokens": i, "output_tokens": o, "cache_read_tokens": c}
    )
    return run.record(MODEL_USAGE, body, event_key=key, at=world.now())


def _sealed(store: AdminStore) -> bool:
    return getattr(store, "encryption", None) is not None


async def _counted(store: AdminStore, run_id: str) -> UsageTotals:
    """A run's usage counted from its listed records (plaintext sizes)."""
    total = UsageTotals(runs=1)
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor)
        for record in page.records:
            tokens = record_tokens(record.type, record.payload) or (0, 0, 0)
            i, o, c = tokens
            one = UsageTotals(bytes=len(record.payload), records=1, input_tokens=i,
                              output_tokens=o, cached_tokens=c)  # fmt: skip
            total = add(total, one)
        cursor = page.next_cursor
        if not cursor:
            return total


def _same(store: AdminStore, kept: UsageTotals, counted: UsageTotals) -> None:
    """``kept`` is ``counted``; bytes as stored are larger when the store seals payloads."""
    if _sealed(store):
        assert kept.bytes > counted.bytes, (kept, counted)
        kept = msgspec.structs.replace(kept, bytes=counted.bytes)
    assert kept == counted


async def _same_totals(store: AdminStore, key: str, values: dict[str, str]) -> None:
    """The totals of label ``key`` are those of the sessions carrying each value, added up:
    grouped by the label, for one value, and grouped by it within one value."""
    expected: dict[str, tuple[int, UsageTotals]] = {}
    for sid, value in values.items():
        count, usage = expected.get(value, (0, UsageTotals()))
        expected[value] = (count + 1, add(usage, await store.load_session_usage(sid)))
    rows = await store.usage_by_label(key)
    assert {r.value: (r.sessions, r.usage) for r in rows} == expected
    assert [r.value for r in rows] == sorted(expected)
    for value, (count, usage) in expected.items():
        (one,) = await store.usage_by_label(labels={key: value})
        assert (one.key, one.value, one.sessions, one.usage) == ("", "", count, usage)
        (row,) = await store.usage_by_label(key, labels={key: value})
        assert (row.value, row.sessions, row.usage) == (value, count, usage)
    assert await store.usage_by_label(key, labels={key: "none"}) == []


class UsageConformance(ConformanceBase):
    async def _filled(self, world: World, name: str, labels: dict[str, str]) -> tuple[str, Any]:
        """A session with a root run (notes, two usage records, a batch) and a child."""
        sid = await world.session(name, labels={"ns": world.ns, **labels})
        root = await world.root(f"{name}-root", session=sid)
        await world.store.append_run_record(world.note(root, "n1", b'{"note":"hello"}'))
        await world.store.append_run_record(_usage_record(world, root, "u1", 100, 20, 60))
        await world.store.append_run_records(
            [world.note(root, "n2"), _usage_record(world, root, "u2", 7, 3, 0)]
        )
        child, _ = await world.child(f"{name}-child", parent=root)
        await world.store.append_run_record(_usage_record(world, child, "u1", 5, 5, 5))
        await world.finish(child)
        await world.finish(root)
        return sid, (root, child)

    async def test_usage_counts_what_the_records_hold(self, world: World) -> None:
        sid, runs = await self._filled(world, "acct", {})
        store = world.store
        session_total = UsageTotals()
        for run in runs:
            counted = await _counted(store, run.run.run_id)
            _same(store, await store.load_run_usage(run.run.run_id), counted)
            session_total = add(session_total, counted)
        kept = await store.load_session_usage(sid)
        _same(store, kept, session_total)
        assert (kept.runs, kept.input_tokens, kept.output_tokens, kept.cached_tokens) == (
            2, 112, 28, 65,
        )  # fmt: skip

    async def test_usage_of_an_empty_session_is_zero(self, world: World) -> None:
        sid = await world.session("empty")
        assert await world.store.load_session_usage(sid) == UsageTotals()

    async def test_retries_and_refusals_add_nothing(self, world: World) -> None:
        sid = await world.session("retry", labels={"ns": world.ns})
        root = await world.root("retry-root", session=sid)
        note = world.note(root, "n1")
        await world.store.append_run_record(note)
        before = await world.store.load_session_usage(sid)
        await world.store.append_run_record(note)  # an exact retry
        with pytest.raises(RecordConflictError):  # refused whole: its new record too
            await world.store.append_run_records(
                [world.note(root, "n2"), world.note(root, "n1", b'{"other":1}')]
            )
        assert await world.store.load_session_usage(sid) == before
        assert await world.store.load_run_usage(root.run.run_id) == msgspec.structs.replace(
            before, runs=1
        )

    async def test_usage_by_label_adds_up_the_sessions(self, world: World) -> None:
        a1, _ = await self._filled(world, "a1", {"tenant": "a"})
        a2, _ = await self._filled(world, "a2", {"tenant": "a"})
        b1, _ = await self._filled(world, "b1", {"tenant": "b"})
        await world.session("bare", labels={"ns": world.ns})  # no tenant: left out
        store = world.store
        rows = await store.usage_by_label("tenant", labels={"ns": world.ns})
        assert [(r.key, r.value, r.sessions) for r in rows] == [
            ("tenant", "a", 2),
            ("tenant", "b", 1),
        ]
        ua = add(await store.load_session_usage(a1), await store.load_session_usage(a2))
        assert rows[0].usage == ua
        assert rows[1].usage == await store.load_session_usage(b1)
        (one,) = await store.usage_by_label(labels={"ns": world.ns, "tenant": "b"})
        assert (one.key, one.value, one.sessions, one.usage) == ("", "", 1, rows[1].usage)
        (every,) = await store.usage_by_label(labels={"ns": world.ns})
        assert every.sessions == 4
        assert every.usage == add(ua, rows[1].usage)
        assert await store.usage_by_label("tenant", labels={"ns": world.ns + "-none"}) == []

    async def test_label_totals_follow_every_write(self, world: World) -> None:
        key = f"acct-{uuid.uuid4().hex[:10]}"  # carried by this test's sessions alone
        store = world.store
        a1, _ = await self._filled(world, "la1", {key: "a"})
        a2, _ = await self._filled(world, "la2", {key: "a"})
        b1, _ = await self._filled(world, "lb1", {key: "b"})
        idle = await world.session("lidle", labels={key: "b"})  # no runs: counted all the same
        values = {a1: "a", a2: "a", b1: "b", idle: "b"}
        await _same_totals(store, key, values)
        # an import: an ended session exported, renamed, written back whole
        await store.end_session(a1, ended_at=world.now())
        image = await read_session_image(store, a1)
        ns = uuid.uuid4().hex[: len(world.ns)]
        encoded = msgspec.msgpack.encode(image).replace(world.ns.encode(), ns.encode())
        imported = msgspec.msgpack.decode(encoded, type=SessionImage)
        await store.import_session(imported)
        values[imported.session.id] = "a"
        # a fork: a new session of value "b" holding a copy of a2's history
        holder = await world.session("lfork", labels={"ns": world.ns, key: "b"})
        fork = world.run("lfork-run", session=holder)
        source = CopiedFrom(session_id=a2, run_id=f"{world.ns}-la2-root", through="2")
        copied = fork.record(HISTORY_COPIED, source.encode(), event_key="copied", at=world.now())
        await store.start_root_run(msgspec.structs.replace(fork.root_start(), records=(copied,)))
        await store.append_run_record(_usage_record(world, fork, "u1", 40, 2, 1))
        await world.finish(fork)
        values[holder] = "b"
        await _same_totals(store, key, values)
        # a purge, then a cascading purge that takes the fork's holder with its source
        await store.purge_session(a1)
        del values[a1]
        await _same_totals(store, key, values)
        for sid in (a2, holder):
            await store.end_session(sid, ended_at=world.now())
        receipt = await store.purge_session(a2, cascade=True)
        assert receipt.cascaded == [holder]
        del values[a2], values[holder]
        await _same_totals(store, key, values)

    async def test_usage_by_label_refuses_a_bad_key(self, world: World) -> None:
        with pytest.raises(ValidationError):
            await world.store.usage_by_label("k" * 300)

    async def test_a_purge_takes_the_counters_with_it(self, world: World) -> None:
        sid, (root, _) = await self._filled(world, "gone", {"tenant": "gone"})
        kept, _ = await self._filled(world, "kept", {"tenant": "gone"})
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        with pytest.raises(SessionPurgedError):
            await world.store.load_session_usage(sid)
        with pytest.raises(SessionPurgedError):
            await world.store.load_run_usage(root.run.run_id)
        (row,) = await world.store.usage_by_label("tenant", labels={"ns": world.ns})
        assert row.sessions == 1
        assert row.usage == await world.store.load_session_usage(kept)

    async def test_a_sessionless_run_has_its_own_usage(self, world: World) -> None:
        run = await world.one_shot("lone")
        await world.store.append_run_record(_usage_record(world, run, "u1", 1, 2, 3))
        await world.finish(run, RunStatus.COMPLETED)
        counted = await _counted(world.store, run.run.run_id)
        _same(world.store, await world.store.load_run_usage(run.run.run_id), counted)
