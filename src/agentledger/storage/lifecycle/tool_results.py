"""A tool call's saved result: the first write wins, scratch of a running run.

A parallel tool call cannot record its result on the run's log when it
finishes (the log keeps call order), so it saves the result here, keyed by
the call. A retried attempt reads it back instead of running the tool again.
Saved results are private (never records, never listed) and live only while
their run is running: the transaction that suspends or ends the run deletes
them (:attr:`~agentledger.storage.state.Plan.ended_runs`).
"""

from __future__ import annotations

from agentledger.errors import ValidationError
from agentledger.storage.lifecycle.guards import require_running
from agentledger.storage.lifecycle.reads import require_run
from agentledger.storage.state import Plan, RunRow, StateReader, ToolResultRow
from agentledger.storage.validation import DEFAULT_LIMITS, SizeLimits, require_id


def check_tool_result(
    run_id: object, call_key: object, data: object, limits: SizeLimits | None = None
) -> bytes:
    """The ids and bytes of a save, as the store checks them before reading anything.

    A remote client runs it before sending (with the store's ``limits`` when known).
    """
    require_id("run_id", run_id)
    require_id("call_key", call_key)
    if not isinstance(data, bytes) or not data:
        shown = f"{len(data)} bytes" if isinstance(data, bytes) else type(data).__name__
        raise ValidationError(field="data", expected="non-empty bytes", got=shown)
    if limits is not None and len(data) > limits.max_payload_bytes:
        raise ValidationError(
            field="data",
            expected=f"at most {limits.max_payload_bytes} bytes (this store's limit)",
            got=f"{len(data)} bytes",
        )
    return data


def _running_run(reader: StateReader, run_id: str, call_key: str) -> RunRow:
    require_id("run_id", run_id)
    require_id("call_key", call_key)
    run = require_run(reader, run_id)
    require_running(run)
    return run


def plan_save_tool_result(
    reader: StateReader,
    run_id: str,
    call_key: str,
    data: bytes,
    *,
    limits: SizeLimits = DEFAULT_LIMITS,
) -> Plan[bytes]:
    """``Store.save_tool_result``: keep ``data`` unless a result is saved; return the kept one.

    Another attempt that also ran the tool gets the first attempt's bytes back
    and adopts them, so every attempt goes on with one outcome.
    """
    check_tool_result(run_id, call_key, data, limits)
    run = _running_run(reader, run_id, call_key)
    stored = reader.tool_result(run, call_key)
    if stored is not None:
        return Plan(stored)
    row = ToolResultRow(run_id=run_id, session_id=run.session_id, call_key=call_key, data=data)
    return Plan(data, tool_results=[row])


def load_tool_result(reader: StateReader, run_id: str, call_key: str) -> bytes | None:
    """``Store.load_tool_result``: the saved result of a running run's call, or None."""
    run = _running_run(reader, run_id, call_key)
    return reader.tool_result(run, call_key)
