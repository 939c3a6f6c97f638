"""[V4] reference-seeded and copy-seeded runs replay equal, for random conversations.

Each random conversation is stored twice in one store: once with every history
by reference (next turns, forks at any record, continuations of suspended
runs, reasoning excluded or not) and once with every history copied as literal
``transcript_messages_seeded`` messages, the way runs were seeded before
references. The two sessions' records line up one for one (a reference takes
the place of the seeded copy), so each run of the first must replay exactly as
its twin of the second.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.conformance import World
from agentledger.storage.memory import MemoryStore
from agentledger.storage.replay import build_messages_from_run_log, without_reasoning
from agentledger.storage.sqlite import SQLiteStore
from agentledger.storage.types import Checkpoint, Record
from agentledger.transcript import (
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    encode_messages,
)


@dataclass(frozen=True)
class Step:
    """One run: how its history is given, what it says, and how it ends."""

    kind: str  # "first", "next", "fork"
    source: int  # index of an earlier step (next turn / fork)
    cut: int  # fork: a record of the source, counted from its end
    exclude_reasoning: bool
    tool: bool
    thinking: bool
    suspend: bool


steps = st.lists(
    st.builds(
        Step,
        kind=st.sampled_from(["next", "next", "fork", "first"]),
        source=st.integers(0, 30),
        cut=st.integers(0, 6),
        exclude_reasoning=st.booleans(),
        tool=st.booleans(),
        thinking=st.booleans(),
        suspend=st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def _said(world: World, run: RecordBuilder, key: str, *messages: Message) -> Record:
    return run.record(
        payloads.TRANSCRIPT_APPENDED,
        encode_messages(messages),
        event_key=f"{key}:messages",
        at=world.now(),
    )


def _content(world: World, run: RecordBuilder, i: int, step: Step) -> list[Record]:
    """The run's own messages: the user's, an optional tool exchange, the answer."""
    said = [_said(world, run, "input", Message(role="user", parts=(TextPart(text=f"u{i}"),)))]
    thought: tuple[Any, ...] = (ThinkingPart(text=f"t{i}", signature="s"),) if step.thinking else ()
    if step.tool:
        use = ToolUsePart(id=f"c{i}", name="tool", input={"n": i})
        said.append(_said(world, run, "use", Message(role="assistant", parts=(*thought, use))))
        result = ToolResultPart(tool_use_id=f"c{i}", content={"n": i})
        said.append(_said(world, run, "result", Message(role="user", parts=(result,))))
        thought = ()
    answer = Message(role="assistant", parts=(*thought, TextPart(text=f"a{i}")))
    said.append(_said(world, run, "answer", answer))
    return said


async def _play(world: World, plan: list[Step]) -> list[tuple[str, str]]:
    """Store ``plan`` twice (by reference, by copy); the twin run ids, in order."""
    store = world.store
    by_ref, by_copy = await world.session("ref"), await world.session("copy")
    twins: list[tuple[str, str]] = []
    suspended: dict[int, bool] = {}
    continued: set[int] = set()
    for i, step in enumerate(plan):
        source = step.source % i if i else 0
        kind = "first" if i == 0 else step.kind
        if kind == "next" and suspended.get(source):
            # one successor per suspension: a second turn after it is a fork of it
            kind = "fork" if source in continued else "continuation"
            continued.add(source)
        runs = []
        for sid, copy in ((by_ref, False), (by_copy, True)):
            src_id = twins[source][copy] if i else ""
            predecessor = src_id if kind == "continuation" else ""
            run = world.run(f"{'c' if copy else 'r'}{i}", session=sid, predecessor=predecessor)
            history: list[Record] = []
            if kind != "first":
                last = int((await store.load_run(src_id)).last_record_id)
                through = last if kind != "fork" else max(1, last - step.cut)
                exclude = step.exclude_reasoning and kind != "continuation"
                if copy:
                    messages = await build_messages_from_run_log(
                        store, src_id, through=str(through)
                    )
                    if exclude:
                        messages = without_reasoning(messages)
                    # An empty copy still takes the reference's place, so the twins'
                    # record ids stay equal (forks cut both at the same record).
                    history = [
                        run.record(
                            payloads.TRANSCRIPT_SEEDED if messages else "planner_note",
                            encode_messages(messages) if messages else b"{}",
                            event_key="transcript:seeded",
                            at=world.now(),
                        )
                    ]
                else:
                    ref = payloads.TranscriptReference(
                        kind="next_turn" if kind == "next" else kind,  # type: ignore[arg-type]
                        run_id=src_id,
                        through=str(through),
                        exclude_reasoning=exclude,
                    )
                    history = [
                        run.record(
                            payloads.TRANSCRIPT_REFERENCED,
                            ref.encode(),
                            event_key="transcript:referenced",
                            at=world.now(),
                        )
                    ]
            records = (*history, *_content(world, run, i, step))
            await store.start_root_run(replace(run.root_start(), records=records))
            if step.suspend:
                check = Checkpoint(id=f"cp{i}", data=b"x")
                await store.record_run_suspension(run.suspension(check, at=world.now()))
            else:
                await world.finish(run)
            runs.append(run.run.run_id)
        suspended[i] = step.suspend
        twins.append((runs[0], runs[1]))
    return twins


async def _check(world: World, plan: list[Step]) -> None:
    for ref, copy in await _play(world, plan):
        by_ref = await build_messages_from_run_log(world.store, ref)
        assert by_ref == await build_messages_from_run_log(world.store, copy)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=steps)
def test_reference_and_copy_replay_equal_in_memory(plan: list[Step]) -> None:
    asyncio.run(_check(World(MemoryStore()), plan))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(plan=steps)
def test_reference_and_copy_replay_equal_on_sqlite(plan: list[Step], tmp_path: Path) -> None:
    async def main() -> None:
        async with await SQLiteStore.open(tmp_path / "property.db") as store:
            await _check(World(store), plan)

    asyncio.run(main())
