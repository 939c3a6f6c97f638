"""Conformance: strict lifecycle payloads in commands [J1].

Each lifecycle record a command carries (``run_started``, ``run_completed``,
``run_suspended``, ``child_run_linked``, ``runtime.cancellation_intent``)
decodes as exactly one typed JSON object. Unknown or missing fields, a second
JSON value, invalid UTF-8 and wrong JSON types are refused and write nothing.
The payload Structs themselves encode and decode without loss.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import msgspec
import pytest
from msgspec.structs import replace

from agentledger.errors import ValidationError
from agentledger.storage import payloads
from agentledger.storage.conformance._base import ConformanceBase
from agentledger.storage.conformance._world import World, all_pages
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunCancellation,
    RunStatus,
    RunSuspension,
    RunTerminal,
)

__all__ = ["PayloadConformance"]


class _Case(NamedTuple):
    """One lifecycle payload slot of one command, ready to be filled."""

    field: str  # the ValidationError field a bad payload is reported under
    valid: dict[str, Any]  # a payload the command accepts
    send: Callable[[bytes], Awaitable[object]]  # run the command with these payload bytes
    where: tuple[str, str]  # (run id, event key) of the record once stored


KINDS = [
    "run_started",
    "run_completed",
    "run_completed.candidate",
    "run_suspended",
    "child_run_linked",
    "runtime.cancellation_intent",
]

REQUIRED: dict[str, list[str]] = {
    "run_started": [],
    "run_completed": ["status", "phase"],
    "run_completed.candidate": ["status", "phase"],
    "run_suspended": ["suspension_id", "version", "pending_count", "required_tools"],
    "child_run_linked": ["tool_name", "tool_call_id", "child_run_id", "child_agent_id"],
    "runtime.cancellation_intent": ["reason"],
}

WRONG_TYPES: dict[str, list[dict[str, Any]]] = {
    "run_started": [
        {"labels": "k=v"},
        {"labels": {"k": 1}},
        {"labels": ["k", "v"]},
        {"parent_run_id": None},
        {"predecessor_run_id": 5},
    ],
    "run_completed": [
        {"status": 1},
        {"status": "done"},
        {"phase": None},
        {"failure": "boom"},
        {"labels": []},
    ],
    "run_completed.candidate": [
        {"cancellation": "session_ended"},
        {"cancellation": {"reason": 1}},
    ],
    "run_suspended": [
        {"version": "1"},
        {"version": 1.5},
        {"pending_count": True},
        {"required_tools": "ask"},
        {"required_tools": [1]},
        {"suspension_id": None},
    ],
    "child_run_linked": [
        {"tool_name": 5},
        {"child_run_id": None},
        {"tool_call_id": ["call"]},
    ],
    "runtime.cancellation_intent": [
        {"reason": ["user"]},
        {"reason": None},
        {"reason": {"text": "user"}},
    ],
}


def _encode(body: object) -> bytes:
    return msgspec.json.encode(body)


async def _case(world: World, kind: str) -> _Case:
    """A fresh world for ``kind``: a session, the runs it needs and one pending command."""
    store = world.store
    sid = await world.session("s")
    if kind == "run_started":
        run = world.run("r", session=sid, labels={"k": "v"})
        start = run.root_start()
        return _Case(
            "started.payload",
            {"labels": {"k": "v"}},
            lambda p: store.start_root_run(
                replace(start, started=replace(start.started, payload=p))
            ),
            (run.run.run_id, start.started.event_key),
        )
    if kind == "run_completed.candidate":
        run = world.run("r", session=sid)
        start = run.root_start()
        return _Case(
            "canceled.payload",
            {
                "status": "canceled",
                "phase": "canceled",
                "cancellation": {"reason": "session_ended"},
            },
            lambda p: store.start_root_run(
                replace(start, canceled=replace(start.canceled, payload=p))
            ),
            (run.run.run_id, start.started.event_key),
        )
    if kind == "child_run_linked":
        parent = await world.root("p", session=sid, agent="parent")
        child = world.run("c", session=sid, parent=parent.run.run_id, agent="child")
        link = child.child_start(parent_agent_id="parent", tool_name="tool", tool_call_id="call")
        return _Case(
            "parent_linked.payload",
            {
                "tool_name": "tool",
                "tool_call_id": "call",
                "child_run_id": child.run.run_id,
                "child_agent_id": "child",
            },
            lambda p: store.start_child_run(
                replace(link, parent_linked=replace(link.parent_linked, payload=p))
            ),
            (parent.run.run_id, link.parent_linked.event_key),
        )
    run = await world.root("r", session=sid)
    rid = run.run.run_id
    at = world.now()

    def record(type: str, payload: bytes) -> Record:
        return run.record(type, payload, event_key=type, at=at)

    if kind == "run_completed":
        return _Case(
            "record.payload",
            {"status": "success", "phase": "completed"},
            lambda p: store.record_run_terminal(
                RunTerminal(
                    run_id=rid, status=RunStatus.COMPLETED, record=record(payloads.RUN_COMPLETED, p)
                )
            ),
            (rid, payloads.RUN_COMPLETED),
        )
    if kind == "run_suspended":
        checkpoint = Checkpoint(id="cp", data=b"\x00")
        return _Case(
            "record.payload",
            {"suspension_id": "cp", "version": 2, "pending_count": 1, "required_tools": ["ask"]},
            lambda p: store.record_run_suspension(
                RunSuspension(
                    run_id=rid, checkpoint=checkpoint, record=record(payloads.RUN_SUSPENDED, p)
                )
            ),
            (rid, payloads.RUN_SUSPENDED),
        )
    assert kind == "runtime.cancellation_intent", kind
    return _Case(
        "record.payload",
        {"reason": "user"},
        lambda p: store.record_run_cancellation(
            RunCancellation(
                run_id=rid, reason="user", record=record(payloads.CANCELLATION_INTENT, p)
            )
        ),
        (rid, payloads.CANCELLATION_INTENT),
    )


async def _refused(world: World, case: _Case, bodies: list[bytes], expected: str = "") -> None:
    """Send each payload; each must be a ValidationError on the case's field, writing nothing."""
    assert bodies
    async with world.unchanged():
        for body in bodies:
            with pytest.raises(ValidationError) as info:
                await case.send(body)
            assert info.value.field == case.field, (info.value.field, body)
            if expected:
                assert info.value.expected == expected, (info.value.expected, body)


SAMPLES: list[payloads._Payload] = [
    payloads.RunStarted(),
    payloads.RunStarted(parent_run_id="p", predecessor_run_id="q", labels={"a": "b", "c": ""}),
    payloads.RunCompleted(status="success", phase="completed", labels={"x": "y"}),
    payloads.RunCompleted(
        status="failed",
        phase="failed",
        failure=payloads.Failure(
            message="caf\u00e9 \U0001f642",
            kind="tool_error",
            code="E1",
            retryable=True,
            details={"big": 12345678901234567890, "f": 1.5, "l": [1, None, "x"], "o": {}},
        ),
    ),
    payloads.RunCompleted(
        status="canceled",
        phase="canceled",
        cancellation=payloads.CancellationNote(reason=payloads.ENGINE_CANCELED),
    ),
    payloads.RunSuspended(suspension_id="s", version=3, pending_count=0, required_tools=()),
    payloads.RunSuspended(suspension_id="s", version=1, pending_count=2, required_tools=("a", "b")),
    payloads.ChildRunLinked(tool_name="t", tool_call_id="c", child_run_id="r", child_agent_id="a"),
    payloads.CancellationIntent(reason="user"),
]


class PayloadConformance(ConformanceBase):
    """Capability: strict typed JSON payloads of lifecycle records."""

    # -------------------------------------------------------------- accepted

    @pytest.mark.parametrize("kind", KINDS)
    async def test_payload_valid_baseline_is_accepted(self, world: World, kind: str) -> None:
        """[J1] the well-formed payload of each slot is accepted (the refusals below mean it)."""
        case = await _case(world, kind)
        await case.send(_encode(case.valid))
        rid, key = case.where
        keys = [r.event_key for r in await all_pages(world.store.list_run_records, rid)]
        assert key in keys

    @pytest.mark.parametrize("kind", [k for k in KINDS if k != "run_completed.candidate"])
    async def test_payload_accepted_bytes_are_stored_exactly(self, world: World, kind: str) -> None:
        """[J1] [L8] an accepted payload in another spelling is kept byte for byte."""
        case = await _case(world, kind)
        spelled = json.dumps(case.valid, indent=2, ensure_ascii=True).encode() + b"\n"
        assert spelled != _encode(case.valid)
        await case.send(spelled)
        rid, key = case.where
        stored = [
            r for r in await all_pages(world.store.list_run_records, rid) if r.event_key == key
        ]
        assert [r.payload for r in stored] == [spelled]

    # ------------------------------------------------------------- refusals

    @pytest.mark.parametrize("kind", KINDS)
    async def test_payload_unknown_field_is_refused(self, world: World, kind: str) -> None:
        """[J1] a field the payload type does not define is refused."""
        case = await _case(world, kind)
        bodies = [
            _encode({**case.valid, "surprise": 1}),
            _encode({**case.valid, "Surprise": None}),
            _encode({"surprise": {}, **case.valid}),
        ]
        await _refused(world, case, bodies)

    @pytest.mark.parametrize("kind", [k for k in KINDS if REQUIRED[k]])
    async def test_payload_missing_required_field_is_refused(self, world: World, kind: str) -> None:
        """[J1] a payload without one of its required fields is refused (run_started has none)."""
        case = await _case(world, kind)
        bodies = [
            _encode({k: v for k, v in case.valid.items() if k != name}) for name in REQUIRED[kind]
        ]
        await _refused(world, case, [*bodies, b"{}"])

    @pytest.mark.parametrize("kind", KINDS)
    async def test_payload_second_json_value_is_refused(self, world: World, kind: str) -> None:
        """[J1] exactly one JSON value: anything after the object is refused."""
        case = await _case(world, kind)
        good = _encode(case.valid)
        tails = [b" {}", b"{}", b"\n1", b' "x"', b" null", b" " + good]
        await _refused(world, case, [good + tail for tail in tails], "exactly one JSON value")

    @pytest.mark.parametrize("kind", [k for k in KINDS if REQUIRED[k]])
    async def test_payload_repeated_key_is_refused(self, world: World, kind: str) -> None:
        """[J1] a key repeated in one object is refused, never resolved to its last value."""
        case = await _case(world, kind)
        name = REQUIRED[kind][0]
        key, value = json.dumps(name).encode(), json.dumps(case.valid[name]).encode()
        body = _encode(case.valid)
        bodies = [
            body[:-1] + b"," + key + b":" + value + b"}",  # repeated at the end
            b"{" + key + b":" + value + b"," + body[1:],  # repeated at the start
        ]
        await _refused(world, case, bodies, "each key at most once per object")

    @pytest.mark.parametrize("kind", KINDS)
    async def test_payload_invalid_utf8_is_refused(self, world: World, kind: str) -> None:
        """[J1] a payload that is not valid UTF-8 is refused."""
        case = await _case(world, kind)
        good = _encode(case.valid)
        bodies = [
            good[:-1] + b',"x\xff":1}',
            b"\xff" + good,
            good[:-1] + b',"\xe2\x82":1}',
            good[:-1] + b',"\xc0\xaf":1}',
        ]
        await _refused(world, case, bodies, "valid UTF-8")

    @pytest.mark.parametrize("kind", KINDS)
    async def test_payload_wrong_json_type_is_refused(self, world: World, kind: str) -> None:
        """[J1] a field of the wrong JSON type (or an unknown enum value) is refused."""
        case = await _case(world, kind)
        bodies = [_encode({**case.valid, **change}) for change in WRONG_TYPES[kind]]
        await _refused(world, case, bodies)

    @pytest.mark.parametrize("kind", KINDS)
    async def test_payload_that_is_not_an_object_is_refused(self, world: World, kind: str) -> None:
        """[J1] a lifecycle payload is one JSON object, not an array, string or scalar."""
        case = await _case(world, kind)
        bodies = [b"[]", b"[" + _encode(case.valid) + b"]", b'"{}"', b"null", b"1", b"true"]
        await _refused(world, case, bodies)

    @pytest.mark.parametrize(
        "failure",
        [{"kind": "x"}, {"message": "m", "surprise": 1}, {"message": "m", "retryable": "yes"}],
        ids=["missing-message", "unknown-field", "wrong-type"],
    )
    async def test_payload_failure_object_is_strict(
        self, world: World, failure: dict[str, Any]
    ) -> None:
        """[J1] the nested ``failure`` of a failed ``run_completed`` is strict too."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        body = {"status": "failed", "phase": "failed", "failure": failure}
        record = run.record(payloads.RUN_COMPLETED, _encode(body), event_key="rc", at=world.now())
        cmd = RunTerminal(run_id=run.run.run_id, status=RunStatus.FAILED, record=record)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert info.value.field == "record.payload"

    @pytest.mark.parametrize(
        "note", [{}, {"reason": "engine_canceled", "surprise": 1}, {"reason": None}]
    )
    async def test_payload_cancellation_note_is_strict(
        self, world: World, note: dict[str, Any]
    ) -> None:
        """[J1] the nested ``cancellation`` of a canceled ``run_completed`` is strict too."""
        sid = await world.session("s")
        run = await world.root("r", session=sid)
        body = {"status": "canceled", "phase": "canceled", "cancellation": note}
        record = run.record(payloads.RUN_COMPLETED, _encode(body), event_key="rc", at=world.now())
        cmd = RunTerminal(run_id=run.run.run_id, status=RunStatus.CANCELED, record=record)
        async with world.unchanged():
            with pytest.raises(ValidationError) as info:
                await world.store.record_run_terminal(cmd)
        assert info.value.field == "record.payload"

    # -------------------------------------------------------------- structs

    @pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
    async def test_payload_structs_round_trip(
        self, world: World, sample: payloads._Payload
    ) -> None:
        """[J1] ``decode(encode(x)) == x`` and re-encoding gives the same bytes."""
        data = sample.encode()
        decoded = type(sample).decode(data)
        assert decoded == sample
        assert decoded.encode() == data
        assert type(sample).decode(json.dumps(json.loads(data), indent=1).encode()) == sample

    async def test_payload_encoding_is_canonical(self, world: World) -> None:
        """[J1] encoding omits defaults and keeps the documented key names."""
        assert payloads.RunStarted().encode() == b"{}"
        assert payloads.CancellationIntent(reason="r").encode() == b'{"reason":"r"}'
        assert (
            payloads.RunCompleted(status="success", phase="completed").encode()
            == b'{"status":"success","phase":"completed"}'
        )
        linked = payloads.ChildRunLinked(
            tool_name="t", tool_call_id="c", child_run_id="r", child_agent_id="a"
        )
        assert json.loads(linked.encode()) == {
            "tool_name": "t",
            "tool_call_id": "c",
            "child_run_id": "r",
            "child_agent_id": "a",
        }
        assert payloads.RunStarted.decode(b'{"parent_run_id":"","labels":{}}') == (
            payloads.RunStarted()
        )

    @pytest.mark.parametrize(
        "sample", [SAMPLES[i] for i in (1, 3, 4, 6, 7, 8)], ids=lambda s: type(s).__name__
    )
    @pytest.mark.parametrize(
        ("spoil", "expected"),
        [
            (lambda v: v[:-1] + b',"surprise":1}', None),
            (lambda v: v + b" {}", "exactly one JSON value"),
            (lambda v: v[:-1] + b',"\xff":1}', "valid UTF-8"),
            (lambda v: b"[" + v + b"]", None),
            (lambda v: b"", "exactly one JSON value"),
            (lambda v: v[:-1], "exactly one JSON value"),
        ],
        ids=["unknown-field", "second-value", "invalid-utf8", "array", "empty", "truncated"],
    )
    async def test_payload_decode_refuses_misfits(
        self,
        world: World,
        sample: payloads._Payload,
        spoil: Callable[[bytes], bytes],
        expected: str | None,
    ) -> None:
        """[J1] ``Struct.decode`` reports every misfit as a ValidationError on the payload."""
        cls = type(sample)
        with pytest.raises(ValidationError) as info:
            cls.decode(spoil(sample.encode()))
        assert info.value.field == f"{cls.record_type}.payload"
        if expected is not None:
            assert info.value.expected == expected
