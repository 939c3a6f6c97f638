"""The writer processes of the power-loss harness, run under the recorder (LD_PRELOAD).

``python -m tests.durability.workers KIND ROOT ME COUNT [DURABILITY, DSN or KEYRING]``. Each
worker does real store calls under ROOT and, after each call returns, writes
one line to ``ROOT/acks-KIND-ME``: the acknowledgement. Its record in the log
comes after every record of the call, so a cut before it means "not yet
acknowledged" and a cut after it means the caller was told it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
from datetime import timedelta
from pathlib import Path

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.conformance import World
from agentledger.storage.conformance._world import EPOCH
from agentledger.storage.retention import SweepOutcome, sweep
from agentledger.storage.sqlite import SQLiteStore

__all__ = ["ARCHIVES", "DB", "KEYRING", "TOKENS", "VAULT", "ack_name", "main"]

DB = "ledger.db"
KEYRING = "keyring.json"
VAULT = "vault.db"
TOKENS = "tokens.json"
ARCHIVES = "archives/swept"  # a directory the sweep creates


def ack_name(kind: str, me: int) -> str:
    """The acknowledgement file of worker ``me`` of ``kind``, relative to the root."""
    return f"acks-{kind}-{me}"


class _Acks:
    def __init__(self, root: Path, kind: str, me: int) -> None:
        self._fd = os.open(root / ack_name(kind, me), os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def __call__(self, line: str) -> None:
        os.write(self._fd, f"{line}\n".encode())


async def _appends(root: Path, me: int, count: int, durability: str) -> None:
    """Append ``count`` records to one run of this writer's own session, one call each."""
    ack = _Acks(root, "append", me)
    store = await SQLiteStore.open(root / DB, durability=durability)  # type: ignore[arg-type]
    try:
        sid = f"w{me}"
        await store.create_session(sid, created_at=EPOCH)
        run = RecordBuilder(
            RunStart(run_id=f"w{me}-run", agent_id="a", session_id=sid, started_at=EPOCH)
        )
        await store.start_root_run(run.root_start())
        for i in range(count):
            at = EPOCH + timedelta(milliseconds=i + 1)
            await store.append_run_record(
                run.record("planner_note", b'{"i": %d}' % i, event_key=f"n{i}", at=at)
            )
            ack(str(i))
    finally:
        await store.close()


async def _sealed(root: Path, me: int, count: int, keyring: str) -> None:
    """An encrypted store: each call makes a session (a new data key in the vault) and
    appends one sealed record to its run."""
    from agentledger.storage.encryption import Encryption, Keyring

    ack = _Acks(root, "sealed", me)
    encryption = Encryption(Keyring.from_json(keyring), root / VAULT)
    async with await SQLiteStore.open(root / DB, encryption=encryption) as store:
        for i in range(count):
            sid = f"w{me}-s{i}"
            await store.create_session(sid, created_at=EPOCH)
            run = RecordBuilder(
                RunStart(run_id=f"{sid}-run", agent_id="a", session_id=sid, started_at=EPOCH)
            )
            await store.start_root_run(run.root_start())
            await store.append_run_record(
                run.record("planner_note", b'{"i": %d}' % i, event_key="n0", at=EPOCH)
            )
            ack(str(i))


async def _sweeps(root: Path, me: int, count: int) -> None:
    """Make ended sessions and sweep them (archive, then purge) in rounds."""
    from tests.storage.archived import ended_session

    ack = _Acks(root, "sweep", me)
    async with await SQLiteStore.open(root / DB) as store:
        world = World(store, namespace=f"p{me}")
        for n in range(count):
            await ended_session(world, f"s{n}")
            if n % 2 == 1:
                cutoff = EPOCH + timedelta(days=365)
                for result in await sweep(store, cutoff, archive_to=root / ARCHIVES):
                    if result.outcome is SweepOutcome.PURGED and result.receipt is not None:
                        ack(f"{result.session_id} {result.archive} {result.receipt.digest}")


async def _pg_appends(root: Path, me: int, count: int, dsn: str) -> None:
    """Append ``count`` records through PostgreSQL; writer 0 also forces checkpoints."""
    import psycopg

    from agentledger.storage.postgres import PostgresStore

    ack = _Acks(root, "pg", me)
    store = await PostgresStore.open(dsn, migrate=False)
    try:
        sid = f"w{me}"
        await store.create_session(sid, created_at=EPOCH)
        run = RecordBuilder(
            RunStart(run_id=f"w{me}-run", agent_id="a", session_id=sid, started_at=EPOCH)
        )
        await store.start_root_run(run.root_start())
        for i in range(count):
            at = EPOCH + timedelta(milliseconds=i + 1)
            await store.append_run_record(
                run.record("planner_note", b'{"i": %d}' % i, event_key=f"n{i}", at=at)
            )
            ack(str(i))
            if me == 0 and i % 10 == 9:  # data files written and synced, WAL recycled
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute("CHECKPOINT")
    finally:
        await store.close()


def _keys(root: Path, me: int, count: int) -> None:
    """``agentledger keys add`` to one keyring file, again and again."""
    from agentledger.cli.keys import keys

    ack = _Acks(root, "keys", me)
    for n in range(count):
        with contextlib.redirect_stdout(io.StringIO()):
            keys.main(["add", f"k{n}", "--keyring", str(root / KEYRING)], standalone_mode=False)
        ack(f"k{n}")


def _tokens(root: Path, me: int, count: int) -> None:
    """Add tokens to one token file (``agentledger token new``'s function)."""
    from agentledger.service.auth import add_token

    ack = _Acks(root, "tokens", me)
    for _ in range(count):
        ack(add_token(root / TOKENS, "worker"))


def main(argv: list[str]) -> None:
    """Run one worker: ``KIND ROOT ME COUNT [DURABILITY, DSN or KEYRING JSON]``."""
    kind, root, me, count = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    if kind == "append":
        asyncio.run(_appends(root, me, count, argv[4]))
    elif kind == "pg":
        asyncio.run(_pg_appends(root, me, count, argv[4]))
    elif kind == "sealed":
        asyncio.run(_sealed(root, me, count, argv[4]))
    elif kind == "sweep":
        asyncio.run(_sweeps(root, me, count))
    elif kind == "keys":
        _keys(root, me, count)
    elif kind == "tokens":
        _tokens(root, me, count)
    else:
        raise SystemExit(f"unknown worker kind {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
