"""The runtime's event-key grammar: every key a run writes reads back as what it names,
and a stored payload is read with its writer's checks (damage is an error, never {})."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentledger.errors import CorruptRecordError
from agentledger.runtime import records as rt
from agentledger.runtime.records import EventKey, KeyKind, Phase, parse_event_key
from agentledger.storage.payloads import ChildRunLinked
from agentledger.storage.types import Record


def _record(type: str, payload: bytes, key: str = "k") -> Record:
    return Record(
        run_id="r1",
        agent_id="a",
        session_id="s",
        turn_id="t",
        event_key=key,
        type=type,
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
        payload=payload,
        id="7",
    )


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (rt.phase_key(Phase.PROMPTED), EventKey(KeyKind.PHASE, name="prompted")),
        (
            rt.phase_key(Phase.PLANNING, 2),
            EventKey(KeyKind.PHASE, turn=2, step="turn:2", name="planning"),
        ),
        (rt.prompt_key("p:1"), EventKey(KeyKind.PROMPT, name="p:1")),
        ("transcript:seeded", EventKey(KeyKind.SEEDED)),
        ("transcript:referenced", EventKey(KeyKind.REFERENCED)),
        (rt.messages_key("input"), EventKey(KeyKind.MESSAGES, step="input")),
        (
            rt.messages_key("turn:3:tool_results"),
            EventKey(KeyKind.MESSAGES, turn=3, step="turn:3:tool_results"),
        ),
        (
            rt.tool_key("turn:4", "call_1", "scheduled"),
            EventKey(KeyKind.TOOL, turn=4, step="turn:4", call_id="call_1", stage="scheduled"),
        ),
        (
            rt.tool_key("turn:4", "a:b", "started", 3),
            EventKey(
                KeyKind.TOOL, turn=4, step="turn:4", call_id="a:b", stage="started", attempt=3
            ),
        ),
        (
            rt.tool_key("resume", "c", "result"),
            EventKey(KeyKind.TOOL, step="resume", call_id="c", stage="result"),
        ),
        (rt.note_key(5, 1000), EventKey(KeyKind.NOTE, turn=5, step="turn:5", index=1000)),
        (rt.usage_key(6, 0), EventKey(KeyKind.USAGE, turn=6, step="turn:6", index=0)),
        (
            rt.history_usage_key(7),
            EventKey(KeyKind.USAGE, turn=7, step="turn:7", history=True),
        ),
        (rt.window_key(8), EventKey(KeyKind.WINDOW, turn=8, step="turn:8")),
        ("run_started", EventKey(KeyKind.OTHER)),
        ("turn:x:usage:1", EventKey(KeyKind.OTHER)),
        ("turn:1:usage:", EventKey(KeyKind.OTHER)),
        ("turn:1:tool:c:started:x", EventKey(KeyKind.OTHER)),
    ],
)
def test_a_key_reads_back_as_what_it_names(key: str, expected: EventKey) -> None:
    assert parse_event_key(key) == expected


def test_the_record_builders_use_the_grammar() -> None:
    usage = rt.RecordSpec.usage(2, 1, rt.UsagePayload(model="m"))
    assert parse_event_key(usage.event_key) == EventKey(
        KeyKind.USAGE, turn=2, step="turn:2", index=1
    )
    started = rt.RecordSpec.started("turn:1", "c", "t", "k", 2)
    assert parse_event_key(started.event_key).attempt == 2
    assert rt.history_key(3) == "turn:3:history"


def test_a_payload_is_decoded_with_its_writers_checks() -> None:
    good = _record(rt.MODEL_USAGE, rt.encode_json(rt.UsagePayload(model="m", input_tokens=3)))
    assert rt.decode_payload(good, rt.UsagePayload).input_tokens == 3
    link = ChildRunLinked(tool_name="t", tool_call_id="c", child_run_id="r2", child_agent_id="a")
    assert rt.decode_payload(_record("child_run_linked", link.encode()), ChildRunLinked) == link


@pytest.mark.parametrize(
    ("type", "payload", "kind"),
    [
        (rt.MODEL_USAGE, b"{not json", rt.UsagePayload),
        (rt.MODEL_USAGE, b'{"model": "m", "extra": 1}', rt.UsagePayload),  # no lenient copy
        (rt.MODEL_USAGE, b'{"input_tokens": 1}', rt.UsagePayload),  # a model is required
        ("child_run_linked", b'{"tool_name": "t"}', ChildRunLinked),
        ("child_run_linked", b"[]", ChildRunLinked),
    ],
)
def test_a_damaged_payload_is_a_corrupt_record(type: str, payload: bytes, kind: type) -> None:
    with pytest.raises(CorruptRecordError) as raised:
        rt.decode_payload(_record(type, payload), kind)
    assert raised.value.run_id == "r1"
    assert raised.value.record_id == "7"


def test_a_payload_of_another_record_type_is_a_corrupt_record() -> None:
    note = _record(rt.PLANNER_NOTE, rt.encode_json(rt.UsagePayload(model="m")))
    with pytest.raises(CorruptRecordError, match="expected type 'model_usage'"):
        rt.decode_payload(note, rt.UsagePayload)


def test_a_step_names_its_turn() -> None:
    assert rt.step_turn(rt.turn_step(12)) == 12
    assert rt.step_turn("turn:3:tool_results") == 3
    assert rt.step_turn("resume:answer") == 0
    assert rt.step_turn("") == 0
