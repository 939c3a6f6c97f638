"""[V4]/[V5] one resolved transcript chain, and stored chain records decoded by the checks
their writes passed.

On real stores (memory and an SQLite file), and on hand-made segments where the
damage cannot be written through a store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from agentledger.errors import CorruptRecordError, ValidationError
from agentledger.storage import MemoryStore, Record, payloads
from agentledger.storage.conformance import World
from agentledger.storage.conformance._references import _reference, _said, _turn
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.transcript_chain import (
    ChainScan,
    decode_reference,
    decode_window,
    load_transcript_chain,
    resolve_chain,
)
from agentledger.storage.types import TranscriptSegment
from agentledger.storage.validation import record_number
from agentledger.transcript import Message, TextPart


@pytest.fixture(params=["memory", "sqlite"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    if request.param == "memory":
        yield World(MemoryStore())
        return
    async with await SQLiteStore.open(tmp_path / "chain.db") as store:
        yield World(store)


def _at() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)


def _record(run_id: str, record_id: str, type: str, payload: bytes) -> Record:
    return Record(
        run_id=run_id,
        agent_id="a",
        session_id="s",
        turn_id="",
        event_key=f"k{record_id}",
        type=type,
        timestamp=_at(),
        payload=payload,
        id=record_id,
    )


def _ref(run_id: str, record_id: str, source: str, through: str) -> Record:
    body = payloads.TranscriptReference(kind="fork", run_id=source, through=through)
    return _record(run_id, record_id, payloads.TRANSCRIPT_REFERENCED, body.encode())


def _window(run_id: str, record_id: str, start: str, record: str, message: int = 0) -> Record:
    position = payloads.TranscriptPosition(run_id=start, record=record, message=message)
    body = payloads.TranscriptWindow(policy="last_turns:1", start=position, summary="before")
    return _record(run_id, record_id, payloads.TRANSCRIPT_WINDOW, body.encode())


async def test_links_say_run_cut_depth_exclusion_and_reference(world: World) -> None:
    """Three turns by reference, the newest excluding reasoning: each link of the one
    resolved chain carries what replay, the cache and prompt versions read."""
    sid = await world.session("s")
    one = await _turn(world, "t1", sid, "hello", thinking=True)
    two = await _turn(world, "t2", sid, "again", after=one.run.run_id)
    three = await _turn(world, "t3", sid, "last", after=two.run.run_id, exclude_reasoning=True)
    chain = await load_transcript_chain(world.store, three.run.run_id)
    ids = [r.run.run_id for r in (three, two, one)]
    assert [link.run_id for link in chain.links] == ids
    assert [s.run_id for s in chain.segments] == ids
    assert [link.depth for link in chain.links] == [0, 1, 2]
    assert [link.exclude_reasoning for link in chain.links] == [False, True, True]
    for link in chain.links:
        meta = await world.store.load_run(link.run_id)
        assert (link.first, str(link.through)) == (1, meta.last_record_id)
    assert [decode_reference(link.reference).run_id for link in chain.links[:2]] == ids[1:]  # type: ignore[arg-type]
    assert chain.links[2].reference is None
    assert chain.window is None
    assert (chain.run_id, chain.windowed) == (ids[0], False)
    cut = await load_transcript_chain(world.store, three.run.run_id, through="1")
    assert [link.run_id for link in cut.links] == ids[:1]  # its reference is record 2
    with pytest.raises(ValidationError):
        await load_transcript_chain(world.store, three.run.run_id, through="01")


async def test_the_governing_window_ends_a_windowed_chain(world: World) -> None:
    """The newest window of the first run (from the newest) holding one governs; a
    windowed chain ends at the record it starts at, a whole one reaches the start."""
    sid = await world.session("s")
    one = await _turn(world, "w1", sid, "hello")
    two = await _turn(world, "w2", sid, "again", after=one.run.run_id)
    three = world.run("w3", session=sid)
    last = (await world.store.load_run(two.run.run_id)).last_record_id
    said = _said(world, three, "input", Message(role="user", parts=(TextPart(text="x"),)))
    start = payloads.TranscriptPosition(run_id=two.run.run_id, record="3")  # "again"
    body = payloads.TranscriptWindow(policy="last_turns:2", start=start)
    window = three.record(payloads.TRANSCRIPT_WINDOW, body.encode(), event_key="w", at=world.now())
    records = (_reference(world, three, two.run.run_id, last), said, window)
    await world.store.start_root_run(replace(three.root_start(), records=records))
    for windowed in (True, False):
        chain = await load_transcript_chain(world.store, three.run.run_id, windowed=windowed)
        assert chain.window is not None
        assert (chain.window.record.id, chain.window.link, chain.windowed) == ("4", 0, windowed)
        assert chain.links[0].window == chain.window.record
        expected = [three.run.run_id, two.run.run_id] + ([] if windowed else [one.run.run_id])
        assert [link.run_id for link in chain.links] == expected
        assert chain.links[1].first == (3 if windowed else 1)
        assert chain.links[1].reference is None if windowed else chain.links[1].reference


def test_a_cycle_is_corruption_naming_the_reference_that_closes_it() -> None:
    """Segments whose references name each other (a store could not have written it,
    a damaged or forged one can) are refused, never followed round or cut short."""
    segments = (
        TranscriptSegment(run_id="a", through="2", records=(_ref("a", "2", "b", "2"),)),
        TranscriptSegment(run_id="b", through="2", records=(_ref("b", "2", "a", "2"),)),
    )
    with pytest.raises(CorruptRecordError, match="a cycle") as caught:
        resolve_chain(segments)
    assert (caught.value.run_id, caught.value.record_id) == ("b", "2")


def test_a_window_that_starts_outside_its_chain_is_corruption_when_it_governs() -> None:
    segments = (TranscriptSegment(run_id="a", through="3", records=(_window("a", "3", "z", "1"),)),)
    with pytest.raises(CorruptRecordError, match="outside its transcript chain"):
        resolve_chain(segments, windowed=True)
    assert resolve_chain(segments).window is not None  # the whole conversation still reads


def test_stored_windows_and_references_pass_the_check_their_write_passed() -> None:
    """Read-side decoding is the write-side check: a window whose start message is
    negative, or a reference through a record id of non-ASCII digits, was refused on
    write and is corruption on read (both decoded before)."""
    with pytest.raises(CorruptRecordError, match=r"start\.message") as caught:
        decode_window(_window("a", "3", "a", "1", message=-1))
    assert (caught.value.run_id, caught.value.record_id) == ("a", "3")
    for through in ("\u0663", "\u00b2", "0", "07", "-1", ""):
        with pytest.raises(CorruptRecordError, match="through"):
            decode_reference(_ref("a", "2", "b", through))
    assert decode_reference(_ref("a", "2", "b", "12")).through == "12"


def test_a_checked_reference_is_decoded_once_and_only_for_its_own_type() -> None:
    """A reference or window that passed its check is kept by its type and bytes: read
    again it is the same object; the same bytes under another type are still refused,
    and a misfit is refused (naming its record) every time it is read."""
    ref = _ref("a", "2", "b", "12")
    first = decode_reference(ref)
    assert decode_reference(replace(ref, run_id="c", id="9")) is first
    for other in (payloads.TRANSCRIPT_WINDOW, payloads.TRANSCRIPT_APPENDED):
        with pytest.raises(CorruptRecordError, match="type"):
            decode_reference(replace(ref, type=other))
    window = _window("a", "3", "a", "1")
    assert decode_window(window) is decode_window(replace(window, id="4"))
    with pytest.raises(CorruptRecordError, match="type"):
        decode_window(replace(window, type=payloads.TRANSCRIPT_APPENDED))
    bad = _ref("a", "5", "b", "07")
    for record_id in ("5", "6"):
        with pytest.raises(CorruptRecordError) as caught:
            decode_reference(replace(bad, id=record_id))
        assert caught.value.record_id == record_id


def test_a_record_id_is_an_ascii_decimal_from_one() -> None:
    assert [record_number(t) for t in ("1", "42", "100")] == [1, 42, 100]
    for text in ("", "0", "07", "-1", "+1", " 1", "1.0", "\u00b2", "\u0663", "1\u0663"):
        assert record_number(text) is None, text


async def test_a_reference_through_a_non_ascii_digit_is_refused_writing_nothing(
    world: World,
) -> None:
    """``"²".isdigit()`` is true but ``int("²")`` fails: such a reference is a
    ValidationError on write (it was a bare ValueError), and no run is started."""
    sid = await world.session("s")
    one = await _turn(world, "d1", sid, "hello")
    two = world.run("d2", session=sid)
    for through in ("\u00b2", "\u0663"):
        bad: Any = _reference(world, two, one.run.run_id, through)
        with pytest.raises(ValidationError, match="through"):
            await world.store.start_root_run(replace(two.root_start(), records=(bad,)))
    assert [r.run_id for r in await world.store.list_runs_by_session(sid)] == [one.run.run_id]


# ChainScan: the newest-first scan a windowed read stops early with -----------------


def _scan_row(record: Record) -> tuple[Any, ...]:
    """``record`` as a scan row ``(run_id, seq, turn_id, event_key, type, ts, payload, crc)``."""
    return (record.run_id, int(record.id), "", record.event_key, record.type, 0, record.payload, 0)


def _scanned(run_id: str, newest: int, rows: list[tuple[Any, ...]], size: int) -> ChainScan:
    """A scan fed ``rows`` ``size`` at a time, as a reader does, until it has enough."""
    scan = ChainScan(run_id, newest, lambda row: row[6])
    for at in range(0, len(rows), size):
        if scan.add(rows[at : at + size]):
            break
    return scan


def _answer(run_id: str, newest: int, rows: list[tuple[Any, ...]]) -> bool:
    return ChainScan(run_id, newest, lambda row: row[6]).add(rows)


def test_a_long_chain_read_in_many_batches_walks_each_run_about_once() -> None:
    """Each batch resumes the walk where the last one stopped: a 300-run conversation
    with no window, read 10 rows at a time, visits about 300 runs, not 300 * 30 / 2."""
    runs = 300
    rows = [_scan_row(_ref(f"r{i}", "2", f"r{i - 1}", "4")) for i in range(runs - 1, 0, -1)]
    scan = _scanned(f"r{runs - 1}", 4, rows, 10)
    assert len(scan.rows) == len(rows)  # no window: it reads to the start
    assert not scan.done()
    assert scan.steps <= 2 * runs


def test_a_resumed_scan_answers_as_a_scan_of_all_rows_so_far() -> None:
    """A window that arrives after the walk went past its run (stored before that run's
    reference) still governs: the resumed walk starts again and agrees with a fresh one."""
    rows = [
        _scan_row(_ref("r5", "3", "r4", "4")),
        _scan_row(_ref("r4", "3", "r3", "4")),
        _scan_row(_ref("r3", "3", "r2", "4")),
        _scan_row(_window("r4", "2", "r3", "3")),  # older than r4's reference: a later batch
        _scan_row(_ref("r2", "3", "r1", "4")),
        _scan_row(_ref("r1", "3", "r0", "4")),
    ]
    for size in (1, 2, 3, 4, 6):
        scan = ChainScan("r5", 4, lambda row: row[6])
        for at in range(0, len(rows), size):
            got = scan.add(rows[at : at + size])
            assert got == _answer("r5", 4, rows[: at + size]), (size, at)
            if got:
                break
        # r4's window, starting in r3, ends the walk there: at the batch holding the 4th row
        assert len(scan.rows) == min(len(rows), -(-4 // size) * size)
    assert not _answer("r5", 4, rows[:3])
    assert _answer("r5", 4, rows[:4])


def test_a_resumed_scan_takes_the_reference_of_the_run_it_stopped_at() -> None:
    """The walk stops at a run whose reference it has not read; the batch that brings it
    goes on from there, past a cut that ends the chain."""
    rows = [
        _scan_row(_ref("r3", "2", "r2", "4")),
        _scan_row(_ref("r2", "2", "r1", "4")),
        _scan_row(_ref("r1", "9", "r0", "4")),  # past the cut r2's reference gives r1
    ]
    scan = ChainScan("r3", 4, lambda row: row[6])
    assert not scan.add(rows[:1])
    assert not scan.add(rows[1:2])
    assert scan.add(rows[2:])
    assert scan.add([])  # asked again, the same answer
