"""``wire.py`` owns the bodies of ``POST /v1/calls`` and the frames its answers stream as:
what the service decodes is what the client encodes, and the other way round."""

from __future__ import annotations

import pytest

from agentledger.errors import ValidationError
from agentledger.service import wire


def test_a_group_body_carries_each_call_as_its_method_would_alone() -> None:
    calls = [("load_run", b'{"run_id":"r1"}'), ("load_session_status", b'"s"')]
    decoded = wire.decode_group(wire.encode_group(calls))
    assert [(name, bytes(body)) for name, body in decoded] == calls


def test_a_group_body_past_the_limit_or_not_pairs_is_refused() -> None:
    with pytest.raises(ValidationError, match=f"at most {wire.MAX_CALLS} calls"):
        wire.decode_group(wire.encode_group([("load_run", b"{}")] * (wire.MAX_CALLS + 1)))
    with pytest.raises(ValidationError, match="pairs"):
        wire.decode_group(b'{"not": "an array"}')


def test_a_frame_is_its_length_then_index_status_and_answer() -> None:
    frames = wire.encode_frame(3, 200, b"\x81\xa1a\x01") + wire.encode_frame(0, 404, b"{}")
    read = []
    while frames:
        size = wire.frame_size(frames[: wire.FRAME_HEADER])
        start = wire.FRAME_HEADER
        read.append(wire.decode_frame(frames[start : start + size]))
        frames = frames[start + size :]
    assert read == [(3, 200, b"\x81\xa1a\x01"), (0, 404, b"{}")]


def test_a_method_is_found_by_its_name_and_an_unknown_name_is_refused() -> None:
    assert wire.method_named("load_run").route == "/v1/load_run"
    with pytest.raises(ValidationError, match="the name of a store method"):
        wire.method_named("drop_everything")
