"""The portable session format [G4]: lossless, checked on import, its schema published."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest

from agentledger.errors import (
    CorruptRecordError,
    SessionActiveError,
    SessionConflictError,
    ValidationError,
)
from agentledger.interchange import (
    decode_session,
    encode_session,
    export_session,
    import_session_file,
    session_schema,
)
from agentledger.storage.conformance import World
from agentledger.storage.conformance._import import messaged_session
from agentledger.storage.memory import MemoryStore
from agentledger.storage.session_image import read_session_image, session_digest
from agentledger.storage.sqlite import SQLiteStore
from tests.storage.archived import ended_session

ROOT = Path(__file__).resolve().parents[2]


async def _source(tmp_path: Path) -> tuple[SQLiteStore, list[str]]:
    store = await SQLiteStore.open(tmp_path / "source.db")
    world = World(store, namespace="fmt")
    sids = [await ended_session(world, "kept"), await messaged_session(world, "asked")]
    return store, sids


def _lines(data: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in data.splitlines()]


async def test_export_import_export_is_byte_identical(tmp_path: Path) -> None:
    """Every run, record, checkpoint and message comes back: the same image, the same
    digest, the same file; payloads are embedded as the JSON they are, numbers untouched."""
    source, sids = await _source(tmp_path)
    async with await SQLiteStore.open(tmp_path / "target.db") as target:
        for sid in sids:
            data = await export_session(source, sid)
            path = tmp_path / f"{sid}.jsonl"
            path.write_bytes(data)
            outcome = await import_session_file(target, path)
            assert outcome.imported
            assert await export_session(target, sid) == data
            original = await read_session_image(source, sid)
            assert await read_session_image(target, sid) == original
            assert outcome.digest == session_digest(original)
            again = await import_session_file(target, path)  # the same session: unchanged
            assert not again.imported
            assert again.digest == outcome.digest
    kept = _lines(await export_session(source, sids[0]))
    assert kept[0]["format"] == "agentledger-session"
    assert kept[0]["version"] == 1
    assert [line.get("kind") for line in kept[1:5]] == ["run"] * 4
    notes = [line["payload"] for line in kept if line.get("kind") == "record"]
    assert {"text": "caf\u00e9 \u2615", "n": 1.5} in notes
    assert b'"n":1.50' in await export_session(source, sids[0])  # the stored literal
    assert any(line.get("kind") == "checkpoint" for line in kept)
    asked = _lines(await export_session(source, sids[1]))
    assert [m["fate"] for m in asked if m.get("kind") == "message"] == [
        "queued",
        "interrupting",
        "queued",
    ]
    await source.close()


async def test_every_line_fits_the_published_schema(tmp_path: Path) -> None:
    """The schema shipped in the package is the one in docs/, and every exported line fits."""
    schema = session_schema()
    docs = json.loads((ROOT / "docs" / "agentledger-session.schema.json").read_text())
    assert schema == docs
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    source, sids = await _source(tmp_path)
    for sid in sids:
        for line in _lines(await export_session(source, sid)):
            validator.validate(line)
    await source.close()
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"kind": "record", "run_id": "r"})


def test_payloads_that_cannot_sit_on_one_line_are_carried_as_text() -> None:
    """A payload with a newline in its whitespace is kept byte for byte, as a string."""

    async def make() -> bytes:
        store = MemoryStore()
        world = World(store, namespace="text")
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await store.append_run_record(world.note(run, "k", b'{\n  "a": 1\n}'))
        await world.finish(run)
        await store.end_session(sid, ended_at=world.now())
        return await export_session(store, sid)

    import asyncio

    data = asyncio.run(make())
    (line,) = [x for x in _lines(data) if x.get("payload_text")]
    assert line["payload_text"] == '{\n  "a": 1\n}'
    image = decode_session(data.splitlines(keepends=True))
    assert b"".join(encode_session(image)) == data


async def test_bad_files_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Truncated, malformed, of another version, or inconsistent: a typed error, no session."""
    source, (sid, _) = await _source(tmp_path)
    data = await export_session(source, sid)
    lines = data.splitlines(keepends=True)
    header = json.loads(lines[0])
    records = [i for i, line in enumerate(lines) if b'"kind":"record"' in line]
    skipped = dict(json.loads(lines[records[1]]), id="9")
    cases: dict[str, tuple[bytes, type[Exception], str]] = {
        "truncated": (b"".join(lines[:-2]), ValidationError, "truncated"),
        "malformed": (
            b"".join([*lines[:3], b'{"kind":"run"\n', *lines[4:]]),
            ValidationError,
            "line 4",
        ),
        "unknown kind": (
            b"".join([*lines, b'{"kind":"note"}\n']),
            ValidationError,
            "line",
        ),
        "version": (
            json.dumps({**header, "version": 2}).encode() + b"\n" + b"".join(lines[1:]),
            ValidationError,
            "format version 1",
        ),
        "not this format": (b'{"hello": 1}\n', ValidationError, "agentledger session file"),
        "record ids skip": (
            b"".join(
                [
                    *lines[: records[1]],
                    json.dumps(skipped, separators=(",", ":")).encode() + b"\n",
                    *lines[records[1] + 1 :],
                ]
            ),
            CorruptRecordError,
            "record ids skip",
        ),
        "payload twice": (
            data.replace(b'"payload":{"note":true}', b'"payload":{},"payload_text":"{}"', 1),
            ValidationError,
            "exactly one of payload",
        ),
    }
    async with await SQLiteStore.open(tmp_path / "target.db") as target:
        for name, (content, error, words) in cases.items():
            path = tmp_path / f"{name}.jsonl"
            path.write_bytes(content)
            with pytest.raises(error) as caught:
                await import_session_file(target, path)
            assert words in str(caught.value), (name, caught.value)
            assert (await target.list_sessions()).sessions == [], name
        # the same id with other contents is a conflict, not a silent skip
        await import_session_file(target, _written(tmp_path, "good.jsonl", data))
        changed = data.replace(b'"tier":"gold"', b'"tier":"lead"', 1)
        with pytest.raises(SessionConflictError, match="purge the session first"):
            await import_session_file(target, _written(tmp_path, "changed.jsonl", changed))
    await source.close()


def _written(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


async def test_an_active_session_is_not_exported(tmp_path: Path) -> None:
    async with await SQLiteStore.open(tmp_path / "a.db") as store:
        world = World(store, namespace="active")
        sid = await world.session("open")
        with pytest.raises(SessionActiveError):
            await export_session(store, sid)


def test_header_round_trips_through_msgspec() -> None:
    """The header type refuses unknown fields (a file from a newer writer is not half read)."""
    from agentledger.interchange import SessionFileHeader

    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(
            b'{"format":"agentledger-session","version":1,"runs":0,"records":0,'
            b'"checkpoints":0,"messages":0,"extra":1,"session":{"id":"s","status":"ended",'
            b'"created_at":"2026-01-01T00:00:00Z"}}',
            type=SessionFileHeader,
        )


async def test_through_postgresql_the_file_is_the_same(tmp_path: Path, postgres_dsn: str) -> None:
    """SQLite -> file -> PostgreSQL -> file: the same bytes (times, labels, payloads)."""
    from agentledger.storage.postgres import PostgresStore

    source, sids = await _source(tmp_path)
    target = await PostgresStore.open(postgres_dsn)
    try:
        for sid in sids:
            data = await export_session(source, sid)
            path = _written(tmp_path, f"{sid}.jsonl", data)
            imported = await import_session_file(target, path)
            assert imported.imported
            assert await export_session(target, sid) == data
    finally:
        await target.close()
        await source.close()
