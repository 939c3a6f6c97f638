"""A session's conversation: each turn's messages once, and a fork shown as a branch that
leaves its source at a message, not as the next turn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from msgspec.structs import replace

from agentledger.errors import ValidationError
from agentledger.runtime.busy import MESSAGE_CLAIMED
from agentledger.storage import (
    MemoryStore,
    Record,
    RecordBuilder,
    RunStart,
    RunStatus,
    Store,
    payloads,
)
from agentledger.transcript import Message, TextPart, encode_messages
from agentledger.views import Branch, session_conversation
from agentledger.views.tree import run_tree

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _said(run: RecordBuilder, key: str, role: str, text: str, at: datetime) -> Record:
    message = Message(role=role, parts=(TextPart(text=text),))  # type: ignore[arg-type]
    return run.record(
        payloads.TRANSCRIPT_APPENDED, encode_messages([message]), event_key=f"{key}:messages", at=at
    )


async def _turn(
    store: Store, name: str, n: int, text: str, *, source: str = "", kind: str = "",
    through: str = "", session: str = "s", claimed: bool = False,
) -> str:  # fmt: skip
    at = T0 + timedelta(seconds=n)
    run = RecordBuilder(RunStart(run_id=name, agent_id="a", session_id=session, started_at=at))
    records = []
    if source:
        ref = payloads.TranscriptReference(kind=kind, run_id=source, through=through)  # type: ignore[arg-type]
        records.append(
            run.record(payloads.TRANSCRIPT_REFERENCED, ref.encode(),
                       event_key="transcript:referenced", at=at)
        )  # fmt: skip
    if claimed:  # started for a session's message (as the runtime's message order starts it)
        records.append(
            run.record(MESSAGE_CLAIMED, b'{"claim":"c"}', event_key="session_message:claimed",
                       at=at)
        )  # fmt: skip
    records += [
        _said(run, "input", "user", text, at),
        _said(run, "turn:1:final", "assistant", f"re: {text}", at),
    ]
    await store.start_root_run(replace(run.root_start(), records=tuple(records)))
    await store.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=at))
    return (await store.load_run(name)).last_record_id


async def forked_session(store: Store, session: str = "s", prefix: str = "") -> None:
    """Turns one, two and three, and a fork of two after its user message."""
    await store.create_session(session, created_at=T0)
    one, two, fork, three = (f"{prefix}{name}" for name in ("one", "two", "fork", "three"))
    one_last = await _turn(store, one, 1, "hello", session=session)
    two_last = await _turn(store, two, 2, "again", source=one, kind="next_turn",
                           through=one_last, session=session)  # fmt: skip
    # a fork of "two" through its user message (record 3: started, reference, input)
    await _turn(store, fork, 3, "instead", source=two, kind="fork", through="3", session=session)
    await _turn(store, three, 4, "last", source=two, kind="next_turn", through=two_last,
                session=session)  # fmt: skip


async def test_a_fork_is_a_branch_leaving_its_source_at_a_message() -> None:
    store = MemoryStore()
    await forked_session(store)
    runs = await store.list_runs_by_session("s")
    records = (await store.list_session_run_records("s", limit=1000)).records
    talk = session_conversation(run_tree(runs), records)
    assert talk.turns == {
        "one": "Turn 1", "two": "Turn 2", "fork": "Branch of turn 2", "three": "Turn 3",
    }  # fmt: skip
    said = [m.parts[0].text for m in talk.messages]  # type: ignore[union-attr]
    assert said[:4] == ["hello", "re: hello", "again", "re: again"]
    # the fork leaves "two" after its user message (message 3), not after its answer
    assert talk.branches == {"fork": Branch("fork", "two", "3", 3, "Turn 2")}
    assert talk.corrupt is None
    assert talk.sources == ["one", "one", "two", "two", "fork", "fork", "three", "three"]


async def test_one_path_at_a_time_the_main_one_or_a_branch() -> None:
    store = MemoryStore()
    await forked_session(store)
    runs = await store.list_runs_by_session("s")
    records = (await store.list_session_run_records("s", limit=1000)).records
    talk = session_conversation(run_tree(runs), records)
    assert talk.follows == {"one": "", "two": "one", "fork": "two", "three": "two"}

    def said(branch: str = "") -> list[str]:
        return [talk.messages[n].parts[0].text for n in talk.path(branch)]  # type: ignore[union-attr]

    assert talk.chain() == ["one", "two", "three"]
    assert said() == ["hello", "re: hello", "again", "re: again", "last", "re: last"]
    # the branch: turn one, turn two up to its user message, then the branch's own
    assert talk.chain("fork") == ["one", "two", "fork"]
    assert said("fork") == ["hello", "re: hello", "again", "instead", "re: instead"]
    assert said("three") == said()
    with pytest.raises(ValidationError):
        talk.path("nowhere")


async def test_without_branches_the_path_is_every_message() -> None:
    store = MemoryStore()
    await store.create_session("s", created_at=T0)
    await _turn(store, "one", 1, "hello")
    runs = await store.list_runs_by_session("s")
    records = (await store.list_session_run_records("s", limit=1000)).records
    talk = session_conversation(run_tree(runs), records)
    assert talk.path() == [0, 1]


async def test_a_messages_turn_after_a_canceled_turn_is_the_next_turn() -> None:
    """Its reference cuts the canceled turn (stored as a fork), yet it is the next turn."""
    store = MemoryStore()
    await store.create_session("s", created_at=T0)
    await _turn(store, "one", 1, "hello")
    await _turn(store, "two", 2, "again", source="one", kind="fork", through="3", claimed=True)
    runs = await store.list_runs_by_session("s")
    records = (await store.list_session_run_records("s", limit=1000)).records
    talk = session_conversation(run_tree(runs), records)
    assert talk.turns == {"one": "Turn 1", "two": "Turn 2"}
    assert talk.branches == {}
    assert talk.follows == {"one": "", "two": "one"}


async def test_a_branch_leaves_at_a_message_of_its_own_path() -> None:
    """A second fork, of a later turn, counts the messages of its own path, not the first
    fork's (stored, and numbered in the whole conversation, before the later turn's)."""
    store = MemoryStore()
    await forked_session(store)  # one, two, fork (of two, after message 3), three
    three = await store.load_run("three")
    await _turn(store, "fork2", 5, "other", source="three", kind="fork",
                through=three.last_record_id)  # fmt: skip
    runs = await store.list_runs_by_session("s")
    records = (await store.list_session_run_records("s", limit=1000)).records
    talk = session_conversation(run_tree(runs), records)
    assert talk.branches["fork2"].at == 8  # in the whole conversation: after fork's two
    assert talk.leaves_at("fork2") == 6  # on its own path: one, two, three
    assert talk.leaves_at("fork") == 3
