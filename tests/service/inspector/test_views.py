"""What the inspector's pages are built from, without a browser: windows, trees, conversations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agentledger.errors import ValidationError
from agentledger.service.follow import FOLLOW_PAGE, Notifier, follow
from agentledger.service.inspector.conversation import Exchange, arrange
from agentledger.service.inspector.digest import read_log
from agentledger.service.inspector.positions import end_position, record_types, window
from agentledger.service.inspector.usage import load_prices
from agentledger.storage import MemoryStore, Record, RecordBuilder, RunMeta, RunStart, RunStatus
from agentledger.storage.types import StartOutcome
from agentledger.transcript import Message, TextPart, ToolResultPart, ToolUsePart
from agentledger.views.runs import summarize
from agentledger.views.timeline import Row, Timeline, duration_text, timeline
from agentledger.views.tree import run_tree
from agentledger.views.usage import usage_of

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
    # A page that read the log in large pages finds the same end with a few small reads.
    log = await read_log(store.list_run_records, "r")
    assert len(log.records) == 3 * FOLLOW_PAGE + 1
    assert await log.end(store.list_run_records, "r") == shown.end
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


def _rec(run: RecordBuilder, type: str, key: str, ms: int, payload: bytes = b"{}") -> Record:
    return run.record(type, payload, event_key=key, at=T0 + timedelta(milliseconds=ms))


def _scheduled(call: str) -> bytes:
    return b'{"tool_call_id":"%s","tool_name":"look","input":{}}' % call.encode()


async def _timed_run(parallel: bool, *, finish: bool = True) -> tuple[RunMeta, list[Record]]:
    """A two-turn run as the loop writes it: each write stamped when its step began."""
    store = MemoryStore()
    run = RecordBuilder(RunStart(run_id="r", agent_id="a", started_at=T0))
    await store.start_one_shot_run(run.one_shot_start())
    usage = b'{"model":"m","input_tokens":7,"output_tokens":3}'
    calls = ["c1", "c2"] if parallel else ["c1"]
    batch = [
        _rec(run, "run_phase_changed", "turn:1:phase:planning", 5),
        _rec(run, "model_usage", "turn:1:usage:0", 5, usage),
        *(_rec(run, "tool_call_scheduled", f"turn:1:tool:{c}:scheduled", 5, _scheduled(c))
          for c in calls),
    ]  # fmt: skip
    await store.append_run_records(batch)
    # A lone call's result is stamped when the call began (the planner turn's end); the
    # results of parallel calls when the last one ended.
    result_at = 300 if parallel else 105
    for c in calls:
        await store.append_run_record(
            _rec(run, "tool_result_received", f"turn:1:tool:{c}:result", result_at,
                 b'{"tool_call_id":"%s","tool_name":"look","content":1}' % c.encode())
        )  # fmt: skip
    await store.append_run_records([
        _rec(run, "run_phase_changed", "turn:2:phase:synthesizing", 300),
        _rec(run, "model_usage", "turn:2:usage:0", 300, usage),
    ])  # fmt: skip
    if finish:
        await store.record_run_terminal(
            run.terminal(RunStatus.COMPLETED, at=T0 + timedelta(milliseconds=400))
        )
    meta = await store.load_run("r")
    return meta, (await store.list_run_records("r", limit=1000)).records


def _row(line: Timeline, label: str) -> tuple[float, Row]:
    row = next(r for r in line.rows if r.label == label)
    return round(line.seconds(row) * 1000), row


async def test_timeline_times_each_step_from_the_writes() -> None:
    """A planner turn runs to the next write; a lone call from its result to the next write."""
    meta, records = await _timed_run(parallel=False)
    line = timeline(meta, records, now=T0 + timedelta(hours=1))
    assert round(line.total * 1000) == 400
    assert _row(line, "turn 1 · planner (planning)")[0] == 100
    assert _row(line, "tool · look")[0] == 195
    assert _row(line, "turn 2 · planner (synthesizing)")[0] == 100
    ms, model = _row(line, "model call · m")
    assert ms == 100
    assert "7 in · 3 out tokens" in model.note
    writes = line.rows[-1]
    assert writes.kind == "write"
    assert len(writes.ticks) == 5  # start, turn 1, the call's result, turn 2, the end
    assert duration_text(0.0123) == "12 ms"
    assert duration_text(75.5) == "1 min 15 s"


async def test_timeline_says_when_parallel_calls_share_a_span_and_when_a_run_goes_on() -> None:
    meta, records = await _timed_run(parallel=True, finish=False)
    now = T0 + timedelta(milliseconds=1000)
    line = timeline(meta, records, now=now)
    ms, row = _row(line, "tool · look")
    assert ms == 295
    assert "parallel" in row.note
    assert line.running
    assert round(line.total * 1000) == 1000  # to now
    ms, turn = _row(line, "turn 2 · planner (synthesizing)")
    assert turn.end is None  # still going
    assert ms == 700


async def test_usage_sums_tokens_and_prices_them(tmp_path: Path) -> None:
    """Tokens per turn and model; a cost only when every model has a price."""
    meta, records = await _timed_run(parallel=False)
    usage = usage_of(records)
    assert (usage.total.input, usage.total.output, usage.total.calls) == (14, 6, 2)
    assert usage.by_turn[("r", 2)].input == 7
    assert usage.cost(None) == (None, [])
    table = tmp_path / "prices.toml"
    table.write_text('currency = "EUR"\n[models.m]\ninput = 2\noutput = "10.5"\n')
    prices = load_prices(str(table))
    assert prices is not None
    assert usage.cost(prices) == (Decimal("0.000091"), [])  # 14*2 + 6*10.5 per million
    table.write_text("[models.other]\ninput = 1\n")
    assert usage.cost(load_prices(str(table))) == (None, ["m"])
    summary = summarize([meta], records)["r"]
    assert (summary.turns, summary.tokens.output) == (2, 6)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[models.m]\ninput = -1\n", "models.m.input"),
        ("[models.m]\ninput = true\n", "models.m.input"),
        ("[models.m]\nthinking = 1\n", "models.m"),
        ("currency = 3\n", "AGENTLEDGER_PRICES"),
        ("this is not toml", "AGENTLEDGER_PRICES"),
    ],
)
def test_a_bad_price_table_is_refused_naming_the_field(
    tmp_path: Path, text: str, field: str
) -> None:
    table = tmp_path / "prices.toml"
    table.write_text(text)
    with pytest.raises(ValidationError) as caught:
        load_prices(str(table))
    assert field in caught.value.field
    with pytest.raises(ValidationError):
        load_prices(str(tmp_path / "missing.toml"))
    assert load_prices(None) is None
