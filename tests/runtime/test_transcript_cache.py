"""TranscriptCache: a run's transcript read once, then only what each turn adds.

What it returns must always be what reading the whole log gives [R2], checked
with the verdict of checking the whole transcript [T5]; and a turn must read
a bounded number of records however long the run is.
"""

from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.errors import TranscriptError
from agentledger.runtime import (
    Agent,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    Runtime,
    ToolCall,
    tool,
    user_message,
)
from agentledger.runtime.transcript_cache import TranscriptCache
from agentledger.storage import MemoryStore, Record, RecordBuilder, RunStart, RunStatus
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.transcript import Message, TextPart, encode_messages, validate_planner_transcript
from tests.runtime.support import AnyStore, now_ms
from tests.transcript.test_incremental_check import _loose_messages, _mutated

_PAGE = 32  # the cache's page size: the most a turn reads again


class Counting:
    """A store that counts the records ``list_run_records`` hands out (else the store)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.listed = 0
        self.reads = 0  # the reads (pages and transcript chains) asked for

    async def list_run_records(self, run_id: str, /, cursor: str = "", limit: int = 100) -> Any:
        page = await self.store.list_run_records(run_id, cursor=cursor, limit=limit)
        self.listed += len(page.records)
        self.reads += 1
        return page

    async def load_transcript_chain(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self.store.load_transcript_chain(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class _Log:
    """One root run in a store, written record by record."""

    def __init__(self, store: Any, run_id: str, session_id: str) -> None:
        self.store = store
        self.run = RunStart(run_id=run_id, agent_id="a", session_id=session_id, started_at=now_ms())
        self.builder = RecordBuilder(self.run)
        self.n = 0

    async def start(self) -> None:
        await self.store.start_root_run(self.builder.root_start())

    def _record(self, kind: str, payload: bytes) -> Record:
        self.n += 1
        return self.builder.record(kind, payload, event_key=f"k{self.n}", at=now_ms())

    async def append(self, messages: list[Message], noise: int = 0) -> None:
        """One transcript record holding ``messages``, after ``noise`` other records."""
        batch = [self._record("run_phase_changed", b'{"phase":"planning"}') for _ in range(noise)]
        batch.append(self._record("transcript_messages_appended", encode_messages(messages)))
        await self.store.append_run_records(batch)


def _describe(error: TranscriptError) -> str:
    return f"{error} @{error.message_index}/{error.part_index}/{error.tool_use_ids}"


def _verdict(run: Any) -> str | None:
    """None when ``run()`` passes; else its TranscriptError, in full."""
    try:
        run()
    except TranscriptError as e:
        return _describe(e)
    return None


async def _same_as_whole(cache: TranscriptCache, store: Any, run_id: str, extra: Message) -> bool:
    """The cache's transcript and verdicts equal those of the whole log; False if it refused."""
    whole = await build_messages_from_run_log(store, run_id)
    refused = ""
    try:
        got = await cache.transcript(store, run_id)
    except TranscriptError as e:
        refused = _describe(e)
    if refused:  # refused: the whole transcript breaks a rule before its end
        assert refused == _verdict(partial(validate_planner_transcript, whole, allow_pending=True))
        assert run_id not in cache
        return False
    assert list(got.messages) == whole
    for pending in (False, True):
        assert _verdict(partial(got.validate, allow_pending=pending)) == _verdict(
            partial(validate_planner_transcript, whole, allow_pending=pending)
        )
        assert _verdict(partial(got.validate_next, extra, allow_pending=pending)) == _verdict(
            partial(validate_planner_transcript, [*whole, extra], allow_pending=pending)
        )
    return True


async def _grow(transcript: list[Message], cuts: list[int], extras: list[Message]) -> None:
    store = MemoryStore()
    await store.create_session("s", created_at=now_ms())
    log = _Log(store, "r1", "s")
    await log.start()
    cache = TranscriptCache()
    start = 0
    for i, cut in enumerate([*sorted(set(cuts)), len(transcript)]):
        if cut > start:
            await log.append(transcript[start:cut], noise=i % 3)
            start = cut
        if not await _same_as_whole(cache, store, "r1", extras[i % len(extras)]):
            return


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _mutated().filter(lambda t: all(isinstance(m, Message) for m in t)),
    st.data(),
    st.lists(_loose_messages, min_size=1, max_size=3),
)
def test_a_growing_log_reads_as_the_whole_log(
    transcript: list[Message], data: st.DataObject, extras: list[Message]
) -> None:
    """Random transcripts written piece by piece: after each piece the cache gives the
    whole log's messages, and its checks (to the end, and of one more message) the
    verdicts and errors of validate_planner_transcript on the whole transcript."""
    cuts = data.draw(st.lists(st.integers(0, len(transcript)), max_size=5))
    asyncio.run(_grow(transcript, cuts, extras))


def _turn(rng: random.Random, n: int) -> list[Message]:
    """A tool-use exchange (assistant call, user result) with call id ``c<n>``."""
    from agentledger.transcript import ToolResultPart, ToolUsePart

    calls = [ToolUsePart(id=f"c{n}.{i}", name="t", input={}) for i in range(rng.randint(1, 3))]
    results = [ToolResultPart(tool_use_id=c.id, content=n) for c in calls]
    return [
        Message(role="assistant", parts=tuple(calls)),
        Message(role="user", parts=tuple(results)),
    ]


async def test_a_turn_reads_what_it_adds_and_workers_take_turns(
    store: AnyStore, session: str
) -> None:
    """On a log of hundreds of records, a turn reads at most one page again plus the new
    records, whichever of two caches (two workers) read the run last; both stay exact."""
    rng = random.Random(29)
    log = _Log(store, "long", session)
    await log.start()
    await log.append([Message(role="user", parts=(TextPart(text="go"),))])
    counted = Counting(store)
    workers = [TranscriptCache(), TranscriptCache()]
    read_up_to = [0, 0]  # how many records each worker had read
    for n in range(120):
        await log.append(_turn(rng, n), noise=rng.randint(0, 4))
        w = rng.randint(0, 1)
        known_before = "long" in workers[w]
        counted.listed = 0
        known = await workers[w].transcript(counted, "long")  # type: ignore[arg-type]
        if known_before:  # the new records, and at most one page again
            assert counted.listed <= _PAGE + (log.n - read_up_to[w]), counted.listed
        read_up_to[w] = log.n
        assert list(known.messages) == await build_messages_from_run_log(store, "long")
        known.validate()
    assert log.n > 3 * _PAGE


async def test_it_holds_at_most_max_runs_and_forgets_on_request(
    store: AnyStore, session: str
) -> None:
    """The least recently used run goes first; forget() drops a run."""
    cache = TranscriptCache(max_runs=2)
    for run_id in ("r1", "r2", "r3"):
        log = _Log(store, run_id, session)
        await log.start()
        await log.append([Message(role="user", parts=(TextPart(text=run_id),))])
        await cache.transcript(store, run_id)
        if run_id == "r2":
            await cache.transcript(store, "r1")  # r1 used again: r2 is the oldest now
    assert len(cache) == 2
    assert "r1" in cache
    assert "r3" in cache
    assert "r2" not in cache
    cache.forget("r1")
    assert "r1" not in cache
    assert [m.parts for m in (await cache.transcript(store, "r2")).messages] == [
        (TextPart(text="r2"),)
    ]


@tool
async def tick(n: int) -> int:
    """Returns its input."""
    return n


class _Counter:
    """Asks for ``tick`` ``turns - 1`` times, checking each turn's transcript against the log
    and noting how many records the turn had read to get it."""

    def __init__(self, store: Any, counted: Counting, turns: int) -> None:
        self.store = store
        self.counted = counted
        self.turns = turns
        self.seen = 0
        self.read: list[int] = []
        self.reads: list[int] = []

    async def _next(self, input: PlanInput) -> PlanResult:
        messages = await input.prepare_messages()
        self.read.append(self.counted.listed)
        self.reads.append(self.counted.reads)
        self.counted.listed = self.counted.reads = 0
        assert list(messages) == await build_messages_from_run_log(self.store, input.run.run_id)
        self.seen += 1
        if self.seen == self.turns:
            return PlanResult.answer(f"{len(messages)} messages")
        return PlanResult.call(ToolCall(id=f"t{self.seen}", name="tick", input={"n": self.seen}))

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return await self._next(input)

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return await self._next(input)


async def test_each_turn_of_a_long_run_reads_what_it_adds(store: AnyStore, session: str) -> None:
    """Through the runtime, every planner turn's transcript is the one the log holds, read
    with at most one page of records again plus the turn's new ones however long the run
    (about 7 records a turn, 80 turns); a run that ended is no longer held. In process the
    cache follows the run's writes: a turn reads only when the page it reads next is full
    (about one turn in five)."""
    counted = Counting(store)
    runtime = Runtime(counted)  # type: ignore[arg-type]
    planner = _Counter(store, counted, 80)
    runtime.register_agent(Agent("counter", planner, tools=[tick], max_turns=100))
    out = await runtime.agent_client("counter").run(session, "Count.")
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == f"{1 + 2 * 79} messages"
    assert planner.seen == 80
    assert max(planner.read[1:]) <= _PAGE + 10, planner.read
    assert sum(map(bool, planner.reads)) <= len(planner.reads) // 4, planner.reads
    assert out.run_id not in runtime._activities.transcripts


class _EachRun:
    """Per run: asks for ``tick`` until the transcript holds ``calls`` results, then answers;
    checks every turn's transcript against the run's log."""

    def __init__(self, store: Any, calls: int) -> None:
        self.store = store
        self.calls = calls
        self.turns = 0

    async def _next(self, input: PlanInput) -> PlanResult:
        messages = await input.prepare_messages()
        assert list(messages) == await build_messages_from_run_log(self.store, input.run.run_id)
        self.turns += 1
        done = sum(m.role == "assistant" for m in messages)
        if done == self.calls:
            return PlanResult.answer(f"{len(messages)} messages")
        return PlanResult.call(ToolCall(id=f"t{done}", name="tick", input={"n": done}))

    async def plan_start(self, input: PlanInput) -> PlanResult:
        return await self._next(input)

    async def plan_resume(self, input: PlanResumeInput) -> PlanResult:
        return await self._next(input)


async def test_concurrent_runs_each_turn_sees_its_own_log(store: AnyStore, session: str) -> None:
    """Eight runs at once in one runtime, the cache following each one's writes among the
    others': every turn of every run gets what its log holds."""
    runtime = Runtime(store)
    planner = _EachRun(store, 5)
    runtime.register_agent(Agent("counter", planner, tools=[tick], max_turns=10))
    client = runtime.agent_client("counter")
    sessions = [session]
    for i in range(7):
        await store.create_session(f"{session}-{i}", created_at=now_ms())
        sessions.append(f"{session}-{i}")
    outs = await asyncio.gather(*(client.run(s, "Count.") for s in sessions))
    assert [out.status for out in outs] == [RunStatus.COMPLETED] * 8, outs
    assert {out.text for out in outs} == {"11 messages"}
    assert planner.turns == 6 * 8


async def test_a_new_runs_first_turn_reads_only_what_followed_its_start(
    store: AnyStore, session: str
) -> None:
    """The start's records (history given, the new message) are held as the start wrote
    them: the first planner turn, which writes nothing before it asks (its phase came
    with the start), reads nothing, and gets what the whole log gives (the planner checks
    it against the log). In process the cache follows the run's writes, so the second
    reads nothing either; once the runtime's activities were handed out (a worker
    elsewhere may write the run), the second reads what followed, one page."""
    for shared, reads in ((False, [0, 0]), (True, [0, 1])):
        counted = Counting(store)
        runtime = Runtime(counted)  # type: ignore[arg-type]
        planner = _Counter(store, counted, 2)
        runtime.register_agent(Agent("counter", planner, tools=[tick]))
        if shared:
            runtime.activity_table()
        history = [
            user_message("Before."),
            Message(role="assistant", parts=(TextPart(text="Ok."),)),
        ]
        client = runtime.agent_client("counter")
        out = await client.run(session, [*history, user_message("Count.")])
        assert out.status is RunStatus.COMPLETED, out.failure
        assert out.text == "5 messages"
        assert planner.reads == reads, (shared, planner.reads)  # no whole read of the run
        assert out.run_id not in runtime._activities.transcripts


async def test_a_window_replay_refuses_is_refused_by_the_cache_too(
    store: AnyStore, session: str
) -> None:
    """A compaction whose summary would go before an assistant message: replay refuses it
    as corruption, and so does a cache that already held the run (it applied it)."""
    from agentledger.errors import CorruptRecordError
    from agentledger.storage import payloads

    log = _Log(store, "summary-first", session)
    await log.start()
    said = [Message(role="user", parts=(TextPart(text="a"),))]
    await log.append(said)
    await log.append([Message(role="assistant", parts=(TextPart(text="b"),))])
    cache = TranscriptCache()
    assert len((await cache.transcript(store, "summary-first")).messages) == 2
    answer = (await store.list_run_records("summary-first")).records[-1]
    start = payloads.TranscriptPosition(run_id="summary-first", record=answer.id)
    window = payloads.TranscriptWindow(policy="compact:1", start=start, summary="earlier")
    await store.append_run_records([log._record(payloads.TRANSCRIPT_WINDOW, window.encode())])
    with pytest.raises(CorruptRecordError, match="summary goes before a assistant") as whole:
        await build_messages_from_run_log(store, "summary-first")
    with pytest.raises(CorruptRecordError, match="summary goes before a assistant") as cached:
        await cache.transcript(store, "summary-first")
    assert (cached.value.run_id, cached.value.record_id) == (
        whole.value.run_id,
        whole.value.record_id,
    )
    assert "summary-first" not in cache
