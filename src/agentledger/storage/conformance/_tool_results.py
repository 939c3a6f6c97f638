"""Conformance: a tool call's saved result (``save_tool_result`` / ``load_tool_result``).

A running run may keep one result per call key, private to it: the first save
wins and every later save gets the kept bytes back. It is never a record, and
only a running run has saved results to save or load.
"""

from __future__ import annotations

import pytest

from agentledger.errors import (
    RunNotActiveError,
    RunNotFoundError,
    SessionPurgedError,
    ValidationError,
)
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._races import race, split
from agentledger.storage.conformance._world import AdminStore, World
from agentledger.storage.conformance._world import run_log as _log

__all__ = ["ToolResultConformance"]

_DATA = b'\x00{"content": 42}\xff'


class ToolResultConformance(ConformanceBase):
    """Capability: private per-call results of a running run, the first save winning."""

    async def test_saved_result_reads_back_on_every_handle(
        self, world: World, other_store: AdminStore
    ) -> None:
        """A save returns its bytes; any handle loads them; an unsaved call is None."""
        sid = await world.session("s")
        run_id = (await world.root("r", session=sid)).run.run_id
        assert await world.store.load_tool_result(run_id, "step:tool:a") is None
        assert await world.store.save_tool_result(run_id, "step:tool:a", _DATA) == _DATA
        assert await other_store.load_tool_result(run_id, "step:tool:a") == _DATA
        assert await other_store.load_tool_result(run_id, "step:tool:b") is None

    async def test_first_save_wins(self, world: World) -> None:
        """A later save of other bytes gets the first save's bytes back; nothing changes."""
        sid = await world.session("s")
        run_id = (await world.root("r", session=sid)).run.run_id
        await world.store.save_tool_result(run_id, "k", b"first")
        assert await world.store.save_tool_result(run_id, "k", b"second") == b"first"
        assert await world.store.save_tool_result(run_id, "k", b"first") == b"first"
        assert await world.store.load_tool_result(run_id, "k") == b"first"

    async def test_results_are_kept_per_run_and_call(self, world: World) -> None:
        """One call key on two runs, and two keys on one run, are four results."""
        sid = await world.session("s")
        runs = [(await world.root(name, session=sid)).run.run_id for name in ("r1", "r2")]
        for run_id in runs:
            for key in ("a", "b"):
                await world.store.save_tool_result(run_id, key, f"{run_id}/{key}".encode())
        for run_id in runs:
            for key in ("a", "b"):
                got = await world.store.load_tool_result(run_id, key)
                assert got == f"{run_id}/{key}".encode()

    async def test_a_sessionless_run_saves_results(self, world: World) -> None:
        """A one-shot run keeps results like a session's run."""
        run_id = (await world.one_shot("o")).run.run_id
        assert await world.store.save_tool_result(run_id, "k", _DATA) == _DATA
        assert await world.store.load_tool_result(run_id, "k") == _DATA

    async def test_saved_results_are_private(self, world: World, store: AdminStore) -> None:
        """Never a record: the logs, their ids and the public dump do not change."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        async with world.unchanged():
            await world.store.save_tool_result(run.run.run_id, "k", _DATA)
        result = await world.store.append_run_record(world.note(run, "after"))
        assert result.id == "2"
        log = await _log(store, run.run.run_id)
        assert [r.event_key for r in log][1:] == ["after"]
        assert all(_DATA not in r.payload for r in log)

    async def test_an_ended_or_suspended_run_has_none(self, world: World) -> None:
        """Only a running run saves or loads: afterwards RunNotActiveError, for both."""
        sid = await world.session("s")
        done = await world.root("done", session=sid)
        waiting = await world.root("waiting", session=sid)
        for run in (done, waiting):
            await world.store.save_tool_result(run.run.run_id, "k", _DATA)
        await world.finish(done)
        await world.suspend(waiting)
        for run in (done, waiting):
            with pytest.raises(RunNotActiveError) as caught:
                await world.store.load_tool_result(run.run.run_id, "k")
            assert caught.value.run_id == run.run.run_id
            assert caught.value.expected == "running"
            with pytest.raises(RunNotActiveError):
                await world.store.save_tool_result(run.run.run_id, "k", b"late")

    async def test_unknown_and_purged_runs_are_refused(self, world: World) -> None:
        """No such run is RunNotFoundError; a purged one SessionPurgedError."""
        ghost = world.id("ghost")
        with pytest.raises(RunNotFoundError) as caught:
            await world.store.save_tool_result(ghost, "k", _DATA)
        assert caught.value.run_id == ghost
        with pytest.raises(RunNotFoundError):
            await world.store.load_tool_result(ghost, "k")
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        await world.store.save_tool_result(run.run.run_id, "k", _DATA)
        await world.finish(run)
        await world.store.end_session(sid, ended_at=world.now())
        await world.store.purge_session(sid)
        with pytest.raises(SessionPurgedError):
            await world.store.load_tool_result(run.run.run_id, "k")
        with pytest.raises(SessionPurgedError):
            await world.store.save_tool_result(run.run.run_id, "k", _DATA)

    @pytest.mark.parametrize(
        ("run_id", "call_key", "data", "field"),
        [
            ("", "k", b"x", "run_id"),
            ("RUN", "", b"x", "call_key"),
            ("RUN", "bad\nkey", b"x", "call_key"),
            ("RUN", "k", b"", "data"),
            ("RUN", "k", "text", "data"),
        ],
    )
    async def test_bad_input_is_refused_and_changes_nothing(
        self, world: World, run_id: str, call_key: str, data: bytes, field: str
    ) -> None:
        """Ids are validated and data is non-empty bytes: a ValidationError naming the field."""
        sid = await world.session("s")
        real = (await world.root("r", session=sid)).run.run_id
        run_id = real if run_id == "RUN" else run_id
        with pytest.raises(ValidationError) as caught:
            await world.store.save_tool_result(run_id, call_key, data)
        assert caught.value.field == field
        if field != "data":
            with pytest.raises(ValidationError) as loaded:
                await world.store.load_tool_result(run_id, call_key)
            assert loaded.value.field == field
        else:
            assert await world.store.load_tool_result(real, call_key) is None

    async def test_race_saves_of_one_tool_result(
        self, world: World, store: AdminStore, other_store: AdminStore
    ) -> None:
        """[X5] concurrent saves of different bytes on two handles: every one gets the
        same kept bytes, which one of them gave."""
        sid = await world.session("s")
        run_id = (await world.root("r", session=sid)).run.run_id
        given = [b"writer %d" % i for i in range(self.race_writers)]
        handles = [store if i % 2 == 0 else other_store for i in range(self.race_writers)]

        results = await race(
            [h.save_tool_result(run_id, "k", data) for h, data in zip(handles, given, strict=True)]
        )

        wins, losses = split(results, bytes)
        assert losses == []
        kept = {data for _, data in wins}
        assert len(kept) == 1, results
        assert kept <= set(given)
        assert await other_store.load_tool_result(run_id, "k") in kept
