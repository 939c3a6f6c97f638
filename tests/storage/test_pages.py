"""Run rows to checked pages, shared by both SQL backends: exact timestamps, loud damage."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage.integrity import record_checksum, run_seed
from agentledger.storage.pages import (
    RunHead,
    run_page,
    run_records,
    stamp_time,
    transcript_records,
    unverified_record,
)
from agentledger.storage.payloads import RUN_STARTED, TRANSCRIPT_APPENDED
from agentledger.storage.types import Record, RunStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNIT = {1000: timedelta(milliseconds=1), 1_000_000: timedelta(microseconds=1)}
HEAD = RunHead(agent_id="a", session_id="s", newest=5, status=RunStatus.RUNNING)


def _rows(stamps: list[int]) -> list[tuple[int, str, str, str, int, bytes, int]]:
    seed = run_seed("r", "a", "s")
    return [
        (seq, "t", f"k{seq}", "note", stamp, b"{}", record_checksum(
            seed, seq, "t", f"k{seq}", "note", stamp, b"{}"
        ))
        for seq, stamp in enumerate(stamps, start=1)
    ]  # fmt: skip


@pytest.mark.parametrize("per_second", [1000, 1_000_000])
def test_the_fast_path_agrees_with_exact_arithmetic(per_second: int) -> None:
    """Around and below the bound of the float shortcut, every stamp comes back exactly."""
    unit = timedelta(microseconds=1_000_000 // per_second)
    bound = (2**33 if per_second == 1000 else 2**32) * per_second
    rng = random.Random(11)
    stamps = [rng.randrange(-(2**40), bound * 2) for _ in range(5_000)]
    stamps += [bound - 1 - rng.randrange(10**6) for _ in range(5_000)]  # the worst floats
    stamps += [0, 1, bound - 1, bound, 1_767_225_600_123_456 // (1_000_000 // per_second)]
    for stamp in stamps:
        at = stamp_time(stamp, per_second)
        assert at == _EPOCH + unit * stamp, stamp
        assert at.tzinfo is UTC


@pytest.mark.parametrize("per_second", [1000, 1_000_000])
def test_run_records_build_what_was_written(per_second: int) -> None:
    stamps = [-5, 0, 1_767_225_600_123, 1_767_225_600_123, 2**47]
    records = run_records("r", "a", "s", _rows(stamps), per_second)
    assert [r.timestamp for r in records] == [stamp_time(s, per_second) for s in stamps]
    assert [r.id for r in records] == ["1", "2", "3", "4", "5"]
    assert {(r.run_id, r.agent_id, r.session_id) for r in records} == {("r", "a", "s")}


@pytest.mark.parametrize("per_second", [1000, 1_000_000])
def test_timestamps_built_by_steps_from_the_one_before_are_exact(per_second: int) -> None:
    """Stamps a whole-millisecond step under a second apart (added to the time before),
    and every other kind of neighbour, come back exactly as from the stamp alone."""
    ms = per_second // 1000
    rng = random.Random(7)
    stamps = [1_767_225_600_000 * ms]
    for _ in range(400):
        step = rng.choice([0, 1, 999, 1000, 1001, -1, 1 + rng.randrange(998), 10**6])
        stamps.append(stamps[-1] + step * ms + rng.choice([0, 0, 0, 1]))  # some off the ms
    stamps += [-(2**40), -(2**40) + 999 * ms, 2**47 * ms, 2**47 * ms + ms, 0, ms]
    records = run_records("r", "a", "s", _rows(stamps), per_second)
    assert [r.timestamp for r in records] == [_EPOCH + (_UNIT[per_second] * s) for s in stamps]


def test_damage_is_loud_and_named() -> None:
    rows = _rows([1, 2, 3])
    bad = list(rows[1])
    bad[2] = "k2-edited"
    with pytest.raises(CorruptRecordError, match="checksum") as caught:
        run_records("r", "a", "s", [rows[0], tuple(bad), rows[2]], 1000)
    assert (caught.value.run_id, caught.value.record_id) == ("r", "2")
    unreadable = (*rows[2][:5], None, rows[2][6])
    with pytest.raises(CorruptRecordError, match="unreadable") as caught:
        run_records("r", "a", "s", [rows[0], rows[1], unreadable], 1000)
    assert caught.value.record_id == "3"
    assert unverified_record("r", "a", "s", rows[0], 1000) is None
    damaged = unverified_record("r", "a", "s", tuple(bad), 1000)
    assert damaged is not None
    assert (damaged.id, damaged.event_key) == ("2", "k2-edited")


def test_a_page_with_a_gap_is_refused_and_one_out_of_order_is_put_in_order() -> None:
    rows = _rows([1, 2, 3, 4, 5])
    page = run_page("r", HEAD, rows[::-1], start=0, size=5, per_second=1000, sealer=None)
    assert [r.id for r in page.records] == ["1", "2", "3", "4", "5"]
    assert page.next_cursor == ""
    with pytest.raises(CorruptRecordError, match="sequence gap") as caught:
        run_page("r", HEAD, rows[:2] + rows[3:], start=0, size=5, per_second=1000, sealer=None)
    assert caught.value.record_id == "3"
    first = run_page("r", HEAD, rows[:2], start=0, size=2, per_second=1000, sealer=None)
    assert first.next_cursor != ""


def _typed_rows(types: list[str]) -> list[tuple[int, str, str, str, int, bytes, int]]:
    seed = run_seed("r", "a", "s")
    return [
        (seq, "t", f"k{seq}", kind, 1000 + seq, b"[]", record_checksum(
            seed, seq, "t", f"k{seq}", kind, 1000 + seq, b"[]"
        ))
        for seq, kind in enumerate(types, start=1)
    ]  # fmt: skip


def test_run_records_keeping_some_types_verifies_every_row_in_one_pass() -> None:
    """Given ``keep``, the rows of those types are returned, the lifecycle rows and the last
    row go to ``checked``, the others are only verified: damage or unreadable values in a
    row not kept are named all the same."""
    types = [RUN_STARTED, TRANSCRIPT_APPENDED, "note", TRANSCRIPT_APPENDED, "note"]
    rows = _typed_rows(types)
    keep = frozenset({TRANSCRIPT_APPENDED})
    checked: list[Record] = []
    kept = run_records("r", "a", "s", rows, 1000, keep=keep, checked=checked)
    assert [(r.id, r.type) for r in kept] == [("2", types[1]), ("4", types[3])]
    every = run_records("r", "a", "s", rows, 1000)
    assert kept == tuple(r for r in every if r.id in "24")
    assert checked == [r for r in every if r.id in "15"]
    checked = []
    assert run_records("r", "a", "s", rows[:4], 1000, keep=keep, checked=checked) == kept
    assert [r.id for r in checked] == ["1", "4"]  # the last row, kept and checked
    assert run_records("r", "a", "s", [], 1000, keep=keep) == ()
    for at in (0, 2):  # a row not kept, before and after a kept one
        bad = list(rows)
        bad[at] = (*rows[at][:2], "edited", *rows[at][3:])
        with pytest.raises(CorruptRecordError, match="checksum") as caught:
            run_records("r", "a", "s", bad, 1000, keep=keep)
        assert caught.value.record_id == str(at + 1)
        bad[at] = (*rows[at][:5], None, rows[at][6])
        with pytest.raises(CorruptRecordError, match="unreadable") as caught:
            run_records("r", "a", "s", bad, 1000, keep=keep)
        assert caught.value.record_id == str(at + 1)


def test_transcript_records_keep_their_types_and_check_the_listing() -> None:
    """The rows of the kept types come back in order; the listing's checks still read the
    rows not kept: an ended run whose log does not end with its completion is damage."""
    types = ["note", TRANSCRIPT_APPENDED, "note", TRANSCRIPT_APPENDED]
    rows = _typed_rows(types)
    head = RunHead(agent_id="a", session_id="s", newest=4, status=RunStatus.RUNNING)
    kept = frozenset({TRANSCRIPT_APPENDED})
    records = transcript_records("r", head, rows, 4, kept, per_second=1000, sealer=None)
    assert [r.id for r in records] == ["2", "4"]
    tail = transcript_records("r", head, rows[2:], 4, kept, first=3, per_second=1000, sealer=None)
    assert [r.id for r in tail] == ["4"]
    ended = head._replace(status=RunStatus.COMPLETED)
    with pytest.raises(CorruptRecordError) as caught:
        transcript_records("r", ended, rows, 4, kept, per_second=1000, sealer=None)
    assert caught.value.record_id == "4"
    started = _typed_rows([RUN_STARTED, TRANSCRIPT_APPENDED])  # its payload is no object
    with pytest.raises(CorruptRecordError) as caught:
        transcript_records("r", head, started, 2, kept, per_second=1000, sealer=None)
    assert caught.value.record_id == "1"
