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
    MAX_CHECKPOINT_BYTES,
    MAX_ID_LENGTH,
    MAX_LABEL_KEY_LENGTH,
    MAX_PAYLOAD_BYTES,
)


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


async def test_payload_and_checkpoint_caps_refuse_before_any_write(world: World) -> None:
    sid = await world.session("s")
    run = await world.root("r", session=sid)
    big = b'"' + b"x" * MAX_PAYLOAD_BYTES + b'"'
    async with world.unchanged():
        with pytest.raises(ValidationError, match=f"at most {MAX_PAYLOAD_BYTES} bytes"):
            await world.store.append_run_record(world.note(run, "big", body=big))
        checkpoint = Checkpoint(id="cp", data=b"\x00" * (MAX_CHECKPOINT_BYTES + 1))
        with pytest.raises(ValidationError, match=f"at most {MAX_CHECKPOINT_BYTES} bytes"):
            await world.store.record_run_suspension(run.suspension(checkpoint, at=world.now()))
    await world.store.append_run_record(world.note(run, "fits", body=big[:-3] + b'"'))


@pytest.mark.parametrize("labels", [{"k": "\ud800"}, {"\udfff": "v"}, ["a"]])
def test_record_builder_raises_the_stores_typed_errors(labels: object) -> None:
    world = World(MemoryStore())
    run = world.run("r", session="", labels=labels)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as caught:
        RecordBuilder(run.run).root_start()
    assert caught.value.field == "run.labels"
