"""The msgspec data converter: exact round trips, strict decoding, readable JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from temporalio.api.common.v1 import Payload

from agentledger.engine.temporal import data_converter
from agentledger.engine.temporal.converter import MsgspecJSONPayloadConverter
from agentledger.engine.temporal.failures import error_details, rebuild_error
from agentledger.engine.temporal.options import EngineOptions
from agentledger.errors import RunNotActiveError, SessionNotFoundError, TransientError
from agentledger.runtime import wire
from agentledger.runtime.planner import ToolCall
from agentledger.runtime.records import RecordSpec
from agentledger.runtime.wire import RunInput, ToolCallInput
from agentledger.storage.types import RunStart
from agentledger.transcript import JsonNumber, Message, TextPart

CONVERTER = data_converter.payload_converter


def _round_trip(value: Any, hint: Any) -> Any:
    (payload,) = CONVERTER.to_payloads([value])
    (back,) = CONVERTER.from_payloads([payload], [hint])
    return back


def test_structs_round_trip_exactly_with_their_numbers() -> None:
    """[T4] [X1] a payload that crossed Temporal is the very value that was sent."""
    run = RunStart(
        run_id="r1",
        agent_id="a",
        session_id="s",
        started_at=datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
        labels={"k": "v"},
    )
    call = ToolCall(id="c1", name="t", input={"x": JsonNumber("1e400"), "n": 10**30, "f": 0.1})
    arg = ToolCallInput(run=run, turn_id="t1", call=call)
    back = _round_trip(arg, ToolCallInput)
    assert back == arg
    assert isinstance(back.call.input["x"], JsonNumber)
    assert str(back.call.input["x"].literal) == "1e400"
    assert back.call.input["n"] == 10**30
    (payload,) = CONVERTER.to_payloads([arg])
    assert payload.metadata["encoding"] == b"json/plain"
    assert b'"x":1e400' in payload.data


def test_messages_and_bytes_round_trip() -> None:
    """Transcript messages and record payload bytes keep their exact form."""
    spec = RecordSpec(type="t", event_key="k", payload=b'{"a":1}')
    assert _round_trip(spec, RecordSpec) == spec
    inp = RunInput(
        run_id="r",
        agent_id="a",
        messages=(Message(role="user", parts=(TextPart(text="héllo"),)),),
    )
    assert _round_trip(inp, RunInput) == inp
    assert _round_trip(None, type(None)) is None
    assert _round_trip(b"raw", bytes) == b"raw"


def test_decoding_is_strict_about_types() -> None:
    """Wrong types and missing fields are errors, never silently dropped."""
    converter = MsgspecJSONPayloadConverter()
    for data in (b'{"run_id":"r","agent_id":1}', b'{"run_id":"r"}'):
        bad = Payload(metadata={"encoding": b"json/plain"}, data=data)
        with pytest.raises(RuntimeError, match="not a valid RunInput"):
            converter.from_payload(bad, RunInput)


WIRE_TYPES = [
    EngineOptions,
    *(
        kind
        for kind in vars(wire).values()
        if isinstance(kind, type)
        and issubclass(kind, msgspec.Struct)
        and kind.__module__ == wire.__name__
        and not kind.__name__.startswith("_")
    ),
]


@pytest.mark.parametrize("kind", WIRE_TYPES, ids=lambda kind: kind.__name__)
def test_every_wire_message_ignores_unknown_fields(kind: type) -> None:
    """Rolling deploys: a message from a newer worker, with a field added since, decodes on
    an older one (the field is ignored); the activity and workflow messages all allow it.

    The contract types they carry keep their own rules: transcript parts [T4], ``RunStart``
    and checkpoints stay strict (a change to them is versioned).
    """
    assert not kind.__struct_config__.forbid_unknown_fields


def test_a_newer_workers_plan_turn_output_decodes_here() -> None:
    """A ``PlanTurnOutput`` carrying a field this version does not know decodes, the rest
    intact: an older worker keeps working while a newer one answers its activities."""
    converter = MsgspecJSONPayloadConverter()
    out = wire.PlanTurnOutput(recorded=True)
    (payload,) = CONVERTER.to_payloads([out])
    newer = msgspec.json.decode(payload.data)
    newer["added_in_a_later_release"] = {"any": ["shape", 1]}
    extended = Payload(metadata=payload.metadata, data=msgspec.json.encode(newer))
    assert converter.from_payload(extended, wire.PlanTurnOutput) == out
    assert converter.from_payload(extended, None)["added_in_a_later_release"] == {
        "any": ["shape", 1]
    }


def test_errors_are_rebuilt_with_their_class_and_fields() -> None:
    """A ContractError that crossed Temporal is the same class with the same fields."""
    error = RunNotActiveError(run_id="r1", expected="running", got="completed")
    back = rebuild_error(error_details(error, attempt=2))
    assert type(back) is RunNotActiveError
    assert vars(back) == vars(error)
    assert str(back) == str(error)
    missing = rebuild_error(error_details(SessionNotFoundError(session_id="s9"), attempt=1))
    assert isinstance(missing, SessionNotFoundError)
    assert missing.id == "s9"
    details = error_details(TransientError("down", operation="append"), attempt=3)
    assert details["retryable"] is True
    assert details["attempts"] == 3
    assert rebuild_error(error_details(ValueError("x"), attempt=1)) is None
