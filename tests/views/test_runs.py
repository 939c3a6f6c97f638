"""A run's view folds its log once; a live refresh reads ``load_run`` and only the records
written since, and gives what a whole read gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from agentledger.errors import CorruptRecordError
from agentledger.runtime import records as rt
from agentledger.storage import MemoryStore, Page, RecordBuilder, RunStart, RunStatus
from agentledger.views import RunDigest, read_run_view

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class _CountingStore(MemoryStore):
    """The memory store, counting the records its log listings hand out."""

    listed = 0

    async def list_run_records(self, run_id: str, /, *args: Any, **kwargs: Any) -> Page:
        page = await super().list_run_records(run_id, *args, **kwargs)
        self.listed += len(page.records)
        return page


def _turn(run: RecordBuilder, turn: int, tokens: int) -> list[Any]:
    at = T0 + timedelta(seconds=turn)
    phase = rt.RecordSpec.phase(rt.Phase.PLANNING, turn)
    usage = rt.RecordSpec.usage(turn, 0, rt.UsagePayload(model="m", input_tokens=tokens))
    return [run.record(s.type, s.payload, event_key=s.event_key, at=at) for s in (phase, usage)]


async def test_a_refresh_reads_only_the_tail() -> None:
    store = _CountingStore()
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", started_at=T0))
    await store.start_one_shot_run(run.one_shot_start())
    await store.append_run_records(_turn(run, 1, 5))
    first, digest = await read_run_view(store, "r")
    assert (first.turns, first.tokens.input, store.listed) == (1, 5, 3)

    store.listed = 0
    again, digest = await read_run_view(store, "r", digest)
    assert store.listed == 0  # nothing written since: load_run only
    assert again == first

    await store.append_run_records(_turn(run, 2, 7))
    await store.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=T0 + timedelta(seconds=9)))
    store.listed = 0
    later, digest = await read_run_view(store, "r", digest)
    assert store.listed == 3  # the two records of turn 2 and the ending
    whole, _ = await read_run_view(store, "r")
    assert later == whole
    assert (later.turns, later.tokens.input, later.ended) == (2, 12, T0 + timedelta(seconds=9))
    assert later.usage.by_turn[("r", 2)].input == 7


async def test_a_record_folded_twice_counts_once() -> None:
    store = MemoryStore()
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", started_at=T0))
    await store.start_one_shot_run(run.one_shot_start())
    await store.append_run_records(_turn(run, 1, 5))
    records = (await store.list_run_records("r")).records
    digest = RunDigest("r").extend(records).extend(records)
    assert digest.view(await store.load_run("r")).tokens.input == 5


async def test_a_damaged_first_message_is_a_corrupt_record() -> None:
    store = MemoryStore()
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", started_at=T0))
    await store.start_one_shot_run(run.one_shot_start())
    started = (await store.list_run_records("r")).records[0]
    damaged = msgspec.structs.replace(
        run.record(rt.TRANSCRIPT_APPENDED, b'[{"role": "nobody"}]', event_key="input:messages",
                   at=T0),
        id="2",
    )  # fmt: skip
    with pytest.raises(CorruptRecordError) as raised:
        RunDigest("r").extend([started, damaged])
    assert (raised.value.run_id, raised.value.record_id) == ("r", "2")
