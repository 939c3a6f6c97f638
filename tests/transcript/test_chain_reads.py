"""[V4] a replay reads a transcript chain in a bounded number of statements, round trips
and HTTP calls, whatever its length, and reports damage anywhere in it.

Counted on the real thing: SQLite's own statement trace, libpq's protocol
trace, and the store service's request counter.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agentledger.errors import CorruptRecordError
from agentledger.service.client import StoreClient
from agentledger.storage.conformance import World
from agentledger.storage.conformance._references import _turn
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.sqlite.reader import SQLiteReader
from tests.service.process import ServiceProcess, Tokens
from tests.storage.postgres.test_round_trips import Traced, round_trips


async def _conversation(world: World, turns: int) -> str:
    """A session of ``turns`` turns, each following the one before by reference."""
    sid = await world.session(f"s{turns}")
    previous = ""
    for i in range(turns):
        run = await _turn(world, f"t{turns}-{i}", sid, f"message {i}", after=previous)
        previous = run.run.run_id
    return previous


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    async with await SQLiteStore.open(tmp_path / "chain.db") as store:
        yield store


async def test_sqlite_chain_is_three_statements(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    """Three statements for a chain of 2 turns and of 40: heads, references, rows."""
    world = World(sqlite_store)
    short, long = await _conversation(world, 2), await _conversation(world, 40)
    conn = sqlite3.connect(tmp_path / "chain.db", isolation_level=None)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        counts = []
        for run_id in (short, long):
            statements.clear()
            chain = SQLiteReader(conn).transcript_chain(run_id)
            counts.append(len(statements))
            assert len(chain) in (2, 40)
    finally:
        conn.close()
    assert counts == [3, 3], statements
    replayed = await build_messages_from_run_log(sqlite_store, long)
    assert [m.parts[0].text for m in replayed[::2]] == [f"message {i}" for i in range(40)]  # type: ignore[union-attr]


async def test_postgres_chain_is_two_round_trips(postgres_dsn: str, tmp_path: Path) -> None:
    """Two round trips (pipelined) for a whole chain of 2 turns and of 30; three for the
    windowed read a replay makes (its scan, the heads it names, the rows)."""
    import os

    from psycopg import pq

    store = await PostgresStore.open(postgres_dsn, min_size=1, max_size=1)
    path = tmp_path / "libpq.trace"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        async with store._pool.connection() as conn:
            conn.pgconn.trace(fd)
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        traced = Traced(store, path)
        world = World(store)
        short, long = await _conversation(world, 2), await _conversation(world, 30)
        await traced.mark("short")
        await store.load_transcript_chain(short)
        await traced.mark("long")
        await store.load_transcript_chain(long)
        await traced.mark("windowed short")
        await build_messages_from_run_log(store, short)
        await traced.mark("windowed long")
        replayed = await build_messages_from_run_log(store, long)
        await traced.mark("end")
        phases = await traced.phases()
    finally:
        os.close(fd)
        await store.close()
    assert len(replayed) == 60
    for name, expected in (("short", 2), ("long", 2), ("windowed short", 3), ("windowed long", 3)):
        # Each pipeline ends with a Sync the client waits on (psycopg flushes with
        # it); the F-then-B count of round_trips() would also count messages a
        # pipeline sends while the server already answers, which is no wait.
        waits = [line for line in phases[name].splitlines() if line.split("\t")[2:3] == ["Sync"]]
        assert len(waits) == expected, phases[name]
        assert round_trips(phases[name]) >= 2


def _requests(url: str, method: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("agentledger_requests_total{") and f'method="{method}"' in line
    )


async def test_store_client_chain_is_one_http_call(tmp_path: Path) -> None:
    """One request for a chain of 2 turns and of 30, and no other request."""
    tokens = Tokens(tmp_path / "tokens.json")
    with ServiceProcess(str(tmp_path / "served.db"), tokens.path) as service:
        async with StoreClient(service.url, token=tokens.host) as client:
            world = World(client)
            short, long = await _conversation(world, 2), await _conversation(world, 30)
            for run_id, turns in ((short, 2), (long, 30)):
                before = _requests(service.url, "load_transcript_chain")
                total = sum(_requests(service.url, m) for m in ("list_run_records", "load_run"))
                replayed = await build_messages_from_run_log(client, run_id)
                assert len(replayed) == 2 * turns
                assert _requests(service.url, "load_transcript_chain") == before + 1
                after = sum(_requests(service.url, m) for m in ("list_run_records", "load_run"))
                assert after == total


async def test_damage_in_a_source_names_its_run_and_record(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    """[V4] [J1] a damaged record three turns back fails the replay of the newest turn."""
    world = World(sqlite_store)
    newest = await _conversation(world, 4)
    first = world.run_ids[0]
    conn = sqlite3.connect(tmp_path / "chain.db", isolation_level=None)
    try:
        seq = conn.execute(
            "SELECT seq FROM records WHERE run_id = ? AND event_key = 'input:messages'", (first,)
        ).fetchone()[0]
        conn.execute(
            "UPDATE records SET payload = CAST(replace(CAST(payload AS TEXT), "
            "'message 0', 'message X') AS BLOB) WHERE run_id = ? AND seq = ?",
            (first, seq),
        )
    finally:
        conn.close()
    with pytest.raises(CorruptRecordError) as caught:
        await build_messages_from_run_log(sqlite_store, newest)
    assert (caught.value.run_id, caught.value.record_id) == (first, str(seq))


async def test_a_lost_source_record_is_a_gap(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    """[V4] [J1] a record missing inside a source's cut is a sequence gap, not a shorter history."""
    world = World(sqlite_store)
    newest = await _conversation(world, 3)
    first = world.run_ids[0]
    conn = sqlite3.connect(tmp_path / "chain.db", isolation_level=None)
    try:
        conn.execute("DELETE FROM records WHERE run_id = ? AND seq = 2", (first,))
    finally:
        conn.close()
    with pytest.raises(CorruptRecordError) as caught:
        await build_messages_from_run_log(sqlite_store, newest)
    assert caught.value.run_id == first


async def test_a_misfit_row_elsewhere_in_the_session_does_not_shorten_a_windowed_chain(
    sqlite_store: SQLiteStore,
) -> None:
    """A window row of another run that does not decode (its checksum rewritten, as a
    buggy writer would leave it) is met by the newest-first scan before the reference the
    chain needs: the scan reads on, and the chain replays whole, not cut short."""
    from msgspec.structs import replace

    from agentledger.storage import payloads
    from agentledger.storage.sqlite.schema import _backfill_checksums
    from agentledger.transcript import Message, TextPart, encode_messages

    world = World(sqlite_store)
    sid = await world.session("misfit")
    one = await _turn(world, "m1", sid, "one")
    two = await _turn(world, "m2", sid, "two", after=one.run.run_id)
    other = world.run("m-other", session=sid)
    await sqlite_store.start_root_run(other.root_start())
    three = world.run("m3", session=sid)
    last = (await sqlite_store.load_run(two.run.run_id)).last_record_id
    ref = payloads.TranscriptReference(kind="next_turn", run_id=two.run.run_id, through=last)
    first = three.record(
        payloads.TRANSCRIPT_REFERENCED, ref.encode(), event_key="transcript:referenced",
        at=world.now(),
    )  # fmt: skip
    await sqlite_store.start_root_run(replace(three.root_start(), records=(first,)))
    start = payloads.TranscriptPosition(run_id=two.run.run_id, record="3")  # "two"
    body = payloads.TranscriptWindow(policy="last_turns:2", start=start)
    others = [  # more than a scan batch, between the reference and the window it needs
        other.record(payloads.TRANSCRIPT_WINDOW, body.encode(), event_key=f"w{i}", at=world.now())
        for i in range(80)
    ]
    await sqlite_store.append_run_records(others)  # the newest is damaged below
    said = encode_messages([Message(role="user", parts=(TextPart(text="three"),))])
    await sqlite_store.append_run_records(
        [
            three.record(payloads.TRANSCRIPT_APPENDED, said, event_key="in", at=world.now()),
            three.record(payloads.TRANSCRIPT_WINDOW, body.encode(), event_key="w", at=world.now()),
        ]
    )
    conn = sqlite3.connect(sqlite_store.path, isolation_level=None)
    try:
        update = "UPDATE records SET payload = ? WHERE run_id = ? AND event_key = 'w79'"
        assert conn.execute(update, (b'{"policy": 1}', other.run.run_id)).rowcount == 1
        _backfill_checksums(conn)
    finally:
        conn.close()
    replayed = await build_messages_from_run_log(sqlite_store, three.run.run_id)
    assert [p.text for m in replayed for p in m.parts] == ["two", "re: two", "three"]  # type: ignore[union-attr]
