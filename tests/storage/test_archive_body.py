"""An archive's body decoded a page at a time: the same image as a whole decode, or refused.

The streaming decoder reads msgpack headers itself, so it is checked against
msgspec's own decode of the whole body: a real body decodes to exactly the
same image, at any page boundary; a changed, cut or padded one (its checksum
made to fit) is the same image or a ``CorruptArchiveError``, never another
exception and never other data.
"""

from __future__ import annotations

import hashlib
import random
import zlib
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import CorruptArchiveError
from agentledger.storage import archive_body
from agentledger.storage.archive import archive_session, decode_archive
from agentledger.storage.conformance import World
from agentledger.storage.session_image import SessionImage
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.types import Checkpoint, Record, RunMeta, Session
from tests.storage.archived import ended_session


class _Whole(msgspec.Struct, frozen=True, kw_only=True):
    session: Session
    runs: list[RunMeta]
    records: list[Record]
    checkpoints: dict[str, Checkpoint]


def _parts(data: bytes) -> tuple[bytes, bytes, bytes]:
    magic, manifest, rest = data.split(b"\n", 2)
    return magic + b"\n", manifest + b"\n", zlib.decompress(rest[:-72])


def _archive(head: bytes, manifest: bytes, body: bytes) -> bytes:
    content = head + manifest + zlib.compress(body, 6)
    return content + b"sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n"


@pytest.fixture
async def archived(tmp_path: Path) -> bytes:
    async with await SQLiteStore.open(tmp_path / "source.db") as store:
        world = World(store)
        await ended_session(world, "s")
        path = tmp_path / "s.alarchive"
        await archive_session(store, world.id("s"), path)
    return path.read_bytes()


@pytest.mark.parametrize("page", [1, 7, 64, 65536])
async def test_a_body_decodes_as_a_whole_decode_does_at_any_page_size(
    archived: bytes, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive_body, "PAGE", page)
    _, image = decode_archive(archived, "a")
    whole = msgspec.msgpack.decode(_parts(archived)[2], type=_Whole)
    assert image == SessionImage(
        session=whole.session, runs=whole.runs, records=whole.records, checkpoints=whole.checkpoints
    )


async def test_changed_cut_or_padded_bodies_are_the_same_image_or_refused(
    archived: bytes,
) -> None:
    head, manifest, body = _parts(archived)
    _, image = decode_archive(archived, "a")
    rng = random.Random(5)
    refused = 0
    for trial in range(600):
        changed = bytearray(body)
        kind = trial % 3
        if kind == 0:
            for _ in range(rng.randint(1, 3)):
                changed[rng.randrange(len(changed))] = rng.randrange(256)
        elif kind == 1:
            del changed[rng.randrange(len(changed)) :]
        else:
            changed[rng.randrange(len(changed)) : 0] = rng.randbytes(rng.randint(1, 9))
        try:
            _, got = decode_archive(_archive(head, manifest, bytes(changed)), "a")
        except CorruptArchiveError:
            refused += 1
        else:
            assert got == image, f"trial {trial}: a changed body decoded to other data"
    assert refused > 500, refused


async def test_an_entry_longer_than_its_kind_can_be_is_refused_before_it_is_inflated(
    archived: bytes,
) -> None:
    """A session value of 1 MiB fits the manifest's bound but no session is that long."""
    head, manifest, _ = _parts(archived)
    size = 1 << 20
    body = b"\x84\xa7session\xc6" + size.to_bytes(4, "big") + bytes(size)
    with pytest.raises(CorruptArchiveError) as caught:
        decode_archive(_archive(head, manifest, body), "a")
    assert f"an entry of more than {archive_body.RUN_BOUND} bytes" in caught.value.reason
