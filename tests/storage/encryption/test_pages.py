"""Sealed run rows to checked pages [A2]/[J1]: each row opened once, damage named in order."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentledger.errors import CorruptRecordError
from agentledger.storage.encryption import Encryption, Keyring
from agentledger.storage.integrity import record_checksum, run_seed
from agentledger.storage.pages import RunHead, run_page, run_records, split_transcript
from agentledger.storage.types import Record, RunStatus

AT = datetime(2026, 1, 1, tzinfo=UTC)
STAMP = 1_767_225_600_000
T = "transcript_messages_appended"
TYPES = ["note", "note", T, "note", T]
Row = tuple[int, str, str, str, int, bytes, int]


@pytest.fixture
def sealer(tmp_path: Path) -> Encryption:
    encryption = Encryption(Keyring.generate(), tmp_path / "keys.vault")
    encryption.attach(None)
    return encryption


def _plain(seq: int) -> bytes:
    return b'{"seq": %d}' % seq


def _row(sealer: Encryption, seq: int, type_: str, sealed: bytes | None = None) -> Row:
    record = Record(
        run_id="r",
        agent_id="a",
        session_id="s",
        turn_id="t",
        event_key=f"k{seq}",
        type=type_,
        timestamp=AT,
        payload=_plain(seq),
        id=str(seq),
    )
    if sealed is None:
        sealed = sealer.seal_record(record)
    checksum = record_checksum(run_seed("r", "a", "s"), seq, "t", f"k{seq}", type_, STAMP, sealed)
    return (seq, "t", f"k{seq}", type_, STAMP, sealed, checksum)


def _rows(sealer: Encryption) -> list[Row]:
    return [_row(sealer, seq, type_) for seq, type_ in enumerate(TYPES, start=1)]


def _named(call: object, record_id: str, reason: str) -> None:
    assert callable(call)
    with pytest.raises(CorruptRecordError) as caught:
        call()
    assert (caught.value.run_id, caught.value.record_id) == ("r", record_id)
    assert reason in caught.value.reason


def test_each_row_is_opened_into_one_record(sealer: Encryption) -> None:
    rows = _rows(sealer)
    head = RunHead("a", "s", len(rows), RunStatus.RUNNING)
    page = run_page("r", head, rows, start=0, size=10, per_second=1000, sealer=sealer)
    assert [r.payload for r in page.records] == [_plain(seq) for seq in range(1, 6)]
    assert [r.id for r in page.records] == ["1", "2", "3", "4", "5"]
    payloads = split_transcript("r", head, rows, per_second=1000, sealer=sealer)
    assert payloads == [_plain(3), _plain(5)]


def test_a_moved_ciphertext_is_named_on_pages_and_on_replay(sealer: Encryption) -> None:
    rows = _rows(sealer)
    rows[3] = _row(sealer, 4, "note", sealed=rows[1][5])  # row 2's ciphertext, checksum fixed
    head = RunHead("a", "s", len(rows), RunStatus.RUNNING)
    moved = "do not open"
    _named(lambda: run_page("r", head, rows, start=0, size=10, per_second=1000, sealer=sealer),
           "4", moved)  # fmt: skip
    _named(lambda: split_transcript("r", head, rows, per_second=1000, sealer=sealer), "4", moved)


def test_the_first_damaged_row_is_named_by_its_checksum_before_a_later_seal(
    sealer: Encryption,
) -> None:
    rows = _rows(sealer)
    rows[4] = _row(sealer, 5, T, sealed=rows[2][5])
    seq, _, key, type_, stamp, sealed, checksum = rows[1]
    rows[1] = (seq, "other-turn", key, type_, stamp, sealed, checksum)  # opens, but damaged
    opener = sealer.run_opener("s", "r", 1)
    _named(lambda: run_records("r", "a", "s", rows, 1000, opener), "2", "checksum mismatch")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda sealed: b"\x02" + sealed[1:], id="another version"),
        pytest.param(lambda sealed: sealed[:20], id="truncated"),
        pytest.param(lambda sealed: sealed[:-1] + bytes([sealed[-1] ^ 1]), id="tag"),
    ],
)
def test_sealed_bytes_that_do_not_open_are_named(sealer: Encryption, damage: object) -> None:
    assert callable(damage)
    rows = _rows(sealer)
    rows[2] = _row(sealer, 3, rows[2][3], sealed=damage(rows[2][5]))
    opener = sealer.run_opener("s", "r", 1)
    _named(lambda: run_records("r", "a", "s", rows, 1000, opener), "3", "")
