"""[G2] ``agentledger session purge`` names what was derived and remains: a copy, a
compaction summary of it, a copy of the copy."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentledger.storage.conformance import World
from agentledger.storage.conformance._derived import _fork_of, _source_and_holder, _summarised
from agentledger.storage.derivation import DerivedCopy
from agentledger.storage.sqlite import SQLiteStore
from tests.cli.conftest import run_cli


async def _derived(db: Path) -> tuple[str, list[DerivedCopy]]:
    async with await SQLiteStore.open(db) as store:
        world = World(store, namespace="cli")
        source, _, copy = await _source_and_holder(world, "c")
        again = await _fork_of(world, "c2", copy)
        run_id, window = await _summarised(world, copy, "c-next", "Summary: copied.")
        return source, [copy, again, DerivedCopy(
            session_id=copy.session_id, run_id=run_id, source=copy.source, summary=window
        )]  # fmt: skip


def test_purge_names_what_was_derived_and_remains(tmp_path: Path) -> None:
    db = tmp_path / "derived.db"
    source, (copy, again, summary) = asyncio.run(_derived(db))
    purged = run_cli("--db", str(db), "session", "purge", source)
    assert purged.code == 0, purged.err
    of = f"(of run {copy.source.run_id} through record 2)"
    assert purged.out.splitlines()[2:] == [
        f"remains: a copy in session {copy.session_id}, run {copy.run_id} {of}",
        f"remains: a summary (record {summary.summary}) of a copy in session "
        f"{summary.session_id}, run {summary.run_id} {of}",
        f"remains: a copy in session {again.session_id}, run {again.run_id} "
        f"(of run {copy.run_id} through record 2)",
    ]
