"""What the inspector's pages are built from, without a browser: windows, trees, conversations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentledger.errors import ValidationError
from agentledger.service.follow import FOLLOW_PAGE, Notifier, follow
from agentledger.service.inspector.conversation import Exchange, arrange
from agentledger.service.inspector.positions import end_position, record_types, window
from agentledger.service.inspector.tree import run_tree
from agentledger.storage import MemoryStore, RecordBuilder, RunMeta, RunStart, RunStatus
from agentledger.storage.types import StartOutcome
from agentledger.transcript import Message, TextPart, ToolResultPart, ToolUsePart

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def _run_with(store: MemoryStore, count: int) -> RecordBuilder:
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", started_at=T0))
    await store.start_one_shot_run(run.one_shot_start())
    for i in range(count):
        kind = "even" if i % 2 == 0 else "odd"
        at = T0 + timedelta(milliseconds=i)
        await store.append_run_record(run.record(kind, b"{}", event_key=f"k{i}", at=at))
    return run


async def test_windows_filter_by_type_across_pages_and_resume_where_they_stopped() -> None:
    """Pages of a filtered log chain without gap or duplicate, and end where follow starts."""
    store = MemoryStore()
    run = await _run_with(store, 3 * FOLLOW_PAGE)
    seen: list[str] = []
    after = ""
    while True:
        shown = await window(store.list_run_records, "r", after, limit=37, types=("odd",))
        seen += [r.id for r in shown.records]
        assert {r.type for r in shown.records} <= {"odd"}
        if not shown.next:
            break
        after = shown.next
    assert seen == [str(i) for i in range(3, 3 * FOLLOW_PAGE + 2, 2)]
    assert shown.end == await end_position(store.list_run_records, "r")
    assert (await record_types(store.list_run_records, "r"))["even"] == 3 * FOLLOW_PAGE // 2
    # The follow stream accepts the end position and yields exactly the next record.
    last = run.record("late", b"{}", event_key="late", at=T0 + timedelta(seconds=9))
    await store.append_run_record(last)
    stream = await follow(store.list_run_records, "r", shown.end, notifier=Notifier(),
                          stopping=lambda: False)  # fmt: skip
    events = [event async for event in _take(stream, 2)]
    assert b"event: record" in events[1]
    assert b'"event_key":"late"' in events[1]


async def _take(stream, count: int):  # type: ignore[no-untyped-def]
    async for event in stream:
        yield event
        count -= 1
        if count == 0:
            return


async def test_a_position_the_service_did_not_issue_is_refused() -> None:
    store = MemoryStore()
    await _run_with(store, 3)
    with pytest.raises(ValidationError) as caught:
        await window(store.list_run_records, "r", ".999", limit=10)
    assert caught.value.field == "after"


def _meta(run_id: str, minute: int, *, parent: str = "", successor: str = "") -> RunMeta:
    at = T0 + timedelta(minutes=minute)
    return RunMeta(run_id=run_id, agent_id="a", session_id="s", parent_run_id=parent,
                   status=RunStatus.COMPLETED, start_outcome=StartOutcome.PROCEED, started_at=at,
                   updated_at=at, labels={}, cancellation_reason="",
                   successor_run_id=successor)  # fmt: skip


def test_run_tree_nests_children_and_chains_continuations() -> None:
    runs = [
        _meta("turn2", 2),
        _meta("turn1", 1, successor="turn1b"),
        _meta("child", 3, parent="turn2"),
        _meta("turn1b", 4),
        _meta("orphan", 5, parent="elsewhere"),
    ]
    tree = run_tree(runs)
    assert [(n.run.run_id, n.continues) for n in tree] == [
        ("turn1", ""), ("turn1b", "turn1"), ("turn2", ""), ("orphan", "")
    ]  # fmt: skip
    assert [c.run.run_id for c in tree[2].children] == ["child"]


def test_arrange_puts_each_result_beside_its_call() -> None:
    call = ToolUsePart(id="c1", name="f", input={})
    again = ToolUsePart(id="c1", name="f", input={"n": 2})  # an id reused in a later turn
    result = ToolResultPart(tool_use_id="c1", content=1)
    later = ToolResultPart(tool_use_id="c1", content=2)
    stray = ToolResultPart(tool_use_id="nobody", content="?")
    bubbles = arrange([
        Message(role="assistant", parts=(call,)),
        Message(role="user", parts=(result,)),
        Message(role="assistant", parts=(again,)),
        Message(role="user", parts=(later, stray, TextPart(text="and then?"))),
    ])  # fmt: skip
    assert [b.index for b in bubbles] == [0, 2, 3]  # the results-only message is shown with calls
    assert bubbles[0].items == [Exchange(call, result)]
    assert bubbles[1].items == [Exchange(again, later)]
    assert bubbles[2].items == [stray, TextPart(text="and then?")]
