"""Column encodings: timestamps round-trip exactly, with tzinfo=UTC, over the whole range."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from agentledger.storage.integrity import record_checksum, run_seed
from agentledger.storage.sqlite.rows import decode_records, from_ms, to_ms

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC),
        _EPOCH,
        datetime(2026, 5, 5, 1, 2, 3, 456_000, tzinfo=UTC),
        datetime(2106, 2, 7, 6, 28, 15, 999_000, tzinfo=UTC),  # around 2**32 s
        datetime(2223, 7, 4, tzinfo=UTC),  # near the fast path's bound
        datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC),
    ],
)
def test_timestamps_round_trip(moment: datetime) -> None:
    back = from_ms(to_ms(moment))
    assert back == moment
    assert back.tzinfo is UTC


def test_the_fast_path_agrees_with_exact_arithmetic() -> None:
    rng = random.Random(7)
    for ms in [rng.randrange(-(2**40), 2**43) for _ in range(100_000)]:
        assert from_ms(ms) == _EPOCH + timedelta(milliseconds=ms), ms


def test_pages_decode_timestamps_like_single_rows() -> None:
    seed = run_seed("r", "a", "s")
    rows = [
        (
            "r",
            seq,
            "a",
            "s",
            "t",
            f"k{seq}",
            "note",
            ms,
            b"{}",
            record_checksum(seed, seq, "t", f"k{seq}", "note", ms, b"{}"),
        )
        for seq, ms in enumerate([-5, 0, 1_767_225_600_123, 8_000_000_000_000, 2**47], start=1)
    ]
    records = decode_records(rows)
    assert [r.timestamp for r in records] == [from_ms(row[7]) for row in rows]
    assert [r.id for r in records] == ["1", "2", "3", "4", "5"]
