"""[S2] One codec carries every error of agentledger.errors: same class, same fields."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentledger.errors import (
    AgentledgerError,
    RecordConflictError,
    RunSuspensionConflictError,
    RunTerminalConflictError,
    ValidationError,
)
from agentledger.service.error_codec import decode_error, encode_error, http_status
from agentledger.storage import Checkpoint, RunStatus
from tests.test_errors import SAMPLES

AT = datetime(2026, 1, 1, tzinfo=UTC)
TYPED: list[AgentledgerError] = [
    *SAMPLES,
    RecordConflictError(run_id="r", field="payload", expected=b'{"a":1}', got=b"\xff\x00"),
    RecordConflictError(run_id="r", field="timestamp", expected=AT, got=AT.replace(second=1)),
    RunSuspensionConflictError(
        run_id="r", field="checkpoint", expected=Checkpoint(id="c", data=b"1"), got=None
    ),
    RunTerminalConflictError(
        run_id="r", field="status", expected="completed", got=RunStatus.FAILED
    ),
    ValidationError(field="labels", expected="str values", got={"n": 1, "t": (1, [2])}),
]
# Damage to the store is 5xx; a damaged archive is a file the caller sent (import_archive): 4xx.
TROUBLE = ("TransientError", "OverloadedError", "CorruptRecordError")


@pytest.mark.parametrize("error", TYPED, ids=lambda e: f"{type(e).__name__}")
def test_errors_cross_the_wire_intact(error: AgentledgerError) -> None:
    clone = decode_error(encode_error(error))
    assert type(clone) is type(error)
    assert clone.__dict__ == error.__dict__
    assert str(clone) == str(error)
    assert {type(v) for v in clone.__dict__.values()} == {type(v) for v in error.__dict__.values()}


def test_a_body_that_names_no_agentledger_error_is_not_one() -> None:
    assert decode_error(b'{"error": {"type": "SystemExit", "message": "x", "fields": {}}}') is None
    assert decode_error(b"<html>bad gateway</html>") is None


def test_refusals_are_4xx_and_trouble_is_5xx() -> None:
    for error in TYPED:
        status = http_status(error)
        assert (status >= 500) == (type(error).__name__ in TROUBLE), error
