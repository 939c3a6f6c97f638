"""The session image: read through the public API; its digests are canonical and complete."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

import msgspec
import pytest

from agentledger.storage import MemoryStore, RunStatus
from agentledger.storage.conformance._world import World
from agentledger.storage.session_image import (
    SessionImage,
    image_byte_total,
    read_session_image,
    run_digest,
    session_digest,
)


async def _image() -> tuple[World, SessionImage]:
    """An ended session: a suspended root, its completed child, a failed root; plus a one-shot."""
    world = World(MemoryStore())
    sid = await world.session("s", labels={"tenant": "acme"})
    root = await world.root("root", session=sid)
    child, _ = await world.child("child", parent=root)
    for key in ("a", "b"):
        await world.store.append_run_record(
            world.note(child, key, b'{"n":"' + key.encode() + b'"}')
        )
    await world.store.append_run_record(world.note(root, "r"))
    await world.finish(child)
    await world.suspend(root)
    failed = await world.root("failed", session=sid)
    await world.finish(failed, RunStatus.FAILED)
    await world.one_shot("loner")
    await world.store.end_session(sid, ended_at=world.now())
    return world, await read_session_image(world.store, sid)


async def test_the_image_is_the_session_as_the_public_api_shows_it() -> None:
    world, image = await _image()
    sid = world.id("s")
    assert image.session == await world.store.load_session(sid)
    assert image.runs == await world.store.list_runs_by_session(sid)
    assert [r.run_id for r in image.runs] == [world.id(n) for n in ("root", "child", "failed")]
    page = await world.store.list_session_run_records(sid, limit=1000)
    assert image.records == list(page.records)
    assert all(r.id for r in image.records)
    assert world.id("loner") not in {r.run_id for r in image.records}
    assert image.checkpoints == {
        world.id("root"): await world.store.load_run_suspension(world.id("root"))
    }
    payload = sum(len(r.payload) for r in image.records)
    assert image_byte_total(image) == payload + len(b"\x00private\xff")


async def test_reading_pages_to_the_end() -> None:
    world = World(MemoryStore())
    sid = await world.session("long")
    run = await world.root("run", session=sid)
    await world.store.append_run_records([world.note(run, f"k{i}") for i in range(1100)])
    image = await read_session_image(world.store, sid)
    assert len(image.records) == 1101  # run_started + 1100 notes: more than one page


async def test_digests_survive_encoding_and_decoding() -> None:
    _, image = await _image()
    for codec in (msgspec.json, msgspec.msgpack):
        again = codec.decode(codec.encode(image), type=SessionImage)
        assert again == image
        assert session_digest(again) == session_digest(image)
        for run in image.runs:
            assert run_digest(again, run.run_id) == run_digest(image, run.run_id)
    assert session_digest(image).startswith("sha256:")
    assert len(session_digest(image)) == len("sha256:") + 64


def _variants(value: Any) -> Iterator[Any]:
    """Values differing from ``value`` by as little as possible (one byte, one tick, one key)."""
    if isinstance(value, Enum):
        yield next(member for member in type(value) if member is not value)
    elif isinstance(value, str):
        yield value + "x"
        if value:
            yield value[:-1] + chr(ord(value[-1]) ^ 1)
    elif isinstance(value, bytes):
        yield value[:-1] + bytes([value[-1] ^ 1])
    elif isinstance(value, datetime):
        yield value + timedelta(milliseconds=1)
    elif isinstance(value, dict):
        yield {**value, "k": "v"}
        for key in value:
            yield {**{k: v for k, v in value.items() if k != key}, key: value[key] + "x"}
    elif value is None:
        yield datetime(2026, 1, 1).astimezone()


def _changed_structs(struct: msgspec.Struct) -> Iterator[tuple[str, msgspec.Struct]]:
    for name in struct.__struct_fields__:
        for variant in _variants(getattr(struct, name)):
            yield name, msgspec.structs.replace(struct, **{name: variant})


def _changed_images(image: SessionImage) -> Iterator[tuple[str, SessionImage]]:
    for name, session in _changed_structs(image.session):
        yield f"session.{name}", msgspec.structs.replace(image, session=session)
    for i, run in enumerate(image.runs):
        for name, changed in _changed_structs(run):
            runs = [*image.runs[:i], changed, *image.runs[i + 1 :]]
            yield f"runs[{i}].{name}", msgspec.structs.replace(image, runs=runs)
    for i, record in enumerate(image.records):
        for name, changed in _changed_structs(record):
            records = [*image.records[:i], changed, *image.records[i + 1 :]]
            yield f"records[{i}].{name}", msgspec.structs.replace(image, records=records)
    for run_id, checkpoint in image.checkpoints.items():
        for name, changed in _changed_structs(checkpoint):
            checkpoints = {**image.checkpoints, run_id: changed}
            yield f"checkpoint.{name}", msgspec.structs.replace(image, checkpoints=checkpoints)
    swapped = [image.records[1], image.records[0], *image.records[2:]]
    yield "record order", msgspec.structs.replace(image, records=swapped)
    yield "checkpoint dropped", msgspec.structs.replace(image, checkpoints={})
    yield "record dropped", msgspec.structs.replace(image, records=image.records[:-1])
    yield "run dropped", msgspec.structs.replace(image, runs=image.runs[:-1])


async def test_any_change_to_any_field_changes_the_session_digest() -> None:
    _, image = await _image()
    digest = session_digest(image)
    seen = {digest}
    changes = list(_changed_images(image))
    assert len(changes) > 100
    for what, changed in changes:
        assert changed != image, what
        assert session_digest(changed) != digest, what
        seen.add(session_digest(changed))
    assert len(seen) > 1


async def test_a_run_digest_covers_its_run_only() -> None:
    world, image = await _image()
    root, child = world.id("root"), world.id("child")
    before = {run.run_id: run_digest(image, run.run_id) for run in image.runs}
    assert len(set(before.values())) == len(before)
    i = next(i for i, r in enumerate(image.records) if r.run_id == child and r.event_key == "a")
    record = image.records[i]
    flipped = msgspec.structs.replace(record, payload=record.payload.replace(b"a", b"b"))
    changed = msgspec.structs.replace(
        image, records=[*image.records[:i], flipped, *image.records[i + 1 :]]
    )
    assert run_digest(changed, child) != before[child]
    assert run_digest(changed, root) == before[root]
    with pytest.raises(KeyError):
        run_digest(image, world.id("loner"))
