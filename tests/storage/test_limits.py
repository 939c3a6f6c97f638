"""One length limit per text field, and payload and checkpoint caps, on every backend [J1].

Each is refused with a ValidationError that states the limit, before anything
is written; RecordBuilder raises the same typed errors as the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import ValidationError
from agentledger.storage import Checkpoint, MemoryStore, RecordBuilder
from agentledger.storage.conformance import World
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.validation import (
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_ID_LENGTH,
    MAX_LABEL_KEY_LENGTH,
    SizeLimits,
)

SMALL = {"max_payload_bytes": 256, "max_checkpoint_bytes": 64}
"""Caps small enough to pass cheaply, large enough for every lifecycle record."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    if request.param == "memory":
        yield World(MemoryStore())
    elif request.param == "sqlite":
        async with await SQLiteStore.open(tmp_path / "limits.db") as store:
            yield World(store)
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        async with await PostgresStore.open(dsn) as pg:
            yield World(pg)


async def test_every_text_field_has_a_limit_stated_in_the_error(world: World) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    long = "t" * (MAX_ID_LENGTH + 1)
    note = world.note(run, "n")
    labelled = world.run("labelled", session=sid, labels={"k" * 1_000_000: "v"})
    async with world.unchanged():
        for field in ("turn_id", "event_key", "type"):
            with pytest.raises(ValidationError, match=f"at most {MAX_ID_LENGTH} characters") as e:
                await world.store.append_run_record(msgspec.structs.replace(note, **{field: long}))
            assert e.value.field == f"record.{field}"
        with pytest.raises(ValidationError, match=f"at most {MAX_ID_LENGTH} characters"):
            await world.store.record_run_cancellation(run.cancellation(long, at=world.now()))
        with pytest.raises(ValidationError, match=f"1 to {MAX_LABEL_KEY_LENGTH} characters"):
            await world.store.start_root_run(labelled.root_start())


async def test_default_payload_and_checkpoint_caps_refuse_before_any_write(world: World) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    big = b'"' + b"x" * DEFAULT_MAX_PAYLOAD_BYTES + b'"'
    async with world.unchanged():
        with pytest.raises(ValidationError, match=f"at most {DEFAULT_MAX_PAYLOAD_BYTES} bytes"):
            await world.store.append_run_record(world.note(run, "big", body=big))
        checkpoint = Checkpoint(id="cp", data=b"\x00" * (DEFAULT_MAX_CHECKPOINT_BYTES + 1))
        with pytest.raises(ValidationError, match=f"at most {DEFAULT_MAX_CHECKPOINT_BYTES} bytes"):
            await world.store.record_run_suspension(run.suspension(checkpoint, at=world.now()))
    await world.store.append_run_record(world.note(run, "fits", body=big[:-3] + b'"'))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def capped(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[World, World]]:
    """A store opened with :data:`SMALL` caps and a default one; on SQLite and PostgreSQL
    both are handles on one database."""
    if request.param == "memory":
        yield World(MemoryStore(**SMALL), "caps"), World(MemoryStore(), "caps")
    elif request.param == "sqlite":
        path = tmp_path / "caps.db"
        small = await SQLiteStore.open(path, **SMALL)
        async with small, await SQLiteStore.open(path) as default:
            yield World(small, "caps"), World(default, "caps")
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        pg_small = await PostgresStore.open(dsn, **SMALL)
        async with pg_small, await PostgresStore.open(dsn) as pg_default:
            namespace = f"caps-{id(pg_small)}"
            yield World(pg_small, namespace), World(pg_default, namespace)


async def test_a_store_refuses_what_its_caps_exclude_and_another_store_accepts(
    capped: tuple[World, World],
) -> None:
    """Each store enforces the caps it was opened with, before any write; a batch with
    one oversized record is refused whole."""
    small, default = capped
    created = small.now()
    run = small.run("r", session=small.id("s"))
    for world in (small, default):  # on a shared database the second is an exact retry
        await world.session("s", at=created)
        await world.store.start_root_run(run.root_start())
    at = small.now()
    fits = run.record("planner_note", b'"' + b"x" * 254 + b'"', event_key="fits", at=at)
    over = run.record("planner_note", b'"' + b"x" * 255 + b'"', event_key="over", at=at)
    checkpoint = Checkpoint(id="cp", data=b"\x00" * 65)
    async with small.unchanged():
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await small.store.append_run_record(over)
        assert (caught.value.field, caught.value.got) == ("record.payload", "257 bytes")
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await small.store.append_run_records([fits, over])
        assert caught.value.field == "records[1].payload"
        with pytest.raises(ValidationError, match="at most 64 bytes") as caught:
            await small.store.record_run_suspension(run.suspension(checkpoint, at=at))
        assert (caught.value.field, caught.value.got) == ("checkpoint.data", "65 bytes")
        carrying = run.suspension(Checkpoint(id="cp", data=b"\x00"), at=at)
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await small.store.record_run_suspension(
                msgspec.structs.replace(carrying, records=(fits, over))
            )
        assert caught.value.field == "records[1].payload"
    assert (await small.store.append_run_record(fits)).inserted
    assert (await default.store.append_run_record(over)).inserted
    assert (await default.store.record_run_suspension(run.suspension(checkpoint, at=at))).inserted
    if not isinstance(small.store, MemoryStore):  # one database: the small handle reads it
        listed = (await small.store.list_run_records(run.run.run_id)).records
        assert [r.payload for r in listed if r.event_key == "over"] == [over.payload]
    with pytest.raises(ValidationError, match="at most 256 bytes"):  # a command over the cap
        await small.store.append_run_record(over)  # is refused, even an exact retry


@pytest.mark.parametrize("caps", [{"max_payload_bytes": 0}, {"max_checkpoint_bytes": "1"}])
async def test_a_cap_that_is_not_a_positive_size_is_refused(
    caps: dict[str, object], tmp_path: Path
) -> None:
    name = next(iter(caps))
    with pytest.raises(ValidationError) as caught:
        SizeLimits(**caps)  # type: ignore[arg-type]
    assert caught.value.field == name
    with pytest.raises(ValidationError):
        MemoryStore(**caps)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await SQLiteStore.open(tmp_path / "never.db", **caps)  # type: ignore[arg-type]
    assert not (tmp_path / "never.db").exists()


@pytest.mark.parametrize("labels", [{"k": "\ud800"}, {"\udfff": "v"}, ["a"]])
def test_record_builder_raises_the_stores_typed_errors(labels: object) -> None:
    world = World(MemoryStore())
    run = world.run("r", session="", labels=labels)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as caught:
        RecordBuilder(run.run).root_start()
    assert caught.value.field == "run.labels"
