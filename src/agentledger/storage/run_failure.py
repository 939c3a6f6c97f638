"""Why a failed run failed, as its terminal record says: read in this one place.

A failed run's ``run_completed`` record (the last on its log: nothing follows a
terminal record) carries a :class:`~agentledger.storage.payloads.Failure`: the
error's kind (``ScriptExhaustedError``), its message, and more. The run's row
keeps only the status, so the CLI and the web inspector read the reason here,
one record per failed run, and show it wherever they show the status, as they
show a cancellation's reason.
"""

from __future__ import annotations

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage.cursor import encode_cursor
from agentledger.storage.payloads import Failure, RunCompleted
from agentledger.storage.protocol import Store
from agentledger.storage.types import Record, RunMeta, RunStatus
from agentledger.storage.validation import decode_stored_payload, record_number

__all__ = ["RunFailure", "failure_in", "load_run_failure", "load_run_failures"]


class RunFailure(msgspec.Struct, frozen=True, kw_only=True):
    """Why a run failed: the error's kind (may be ``""``) and message."""

    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.kind else self.message


def failure_in(record: Record) -> RunFailure | None:
    """The failure a ``run_completed`` record carries; None if the run did not fail.

    Raises:
        CorruptRecordError: not a ``run_completed`` record, or its payload does
            not decode as one.
    """
    ending = decode_stored_payload(record, RunCompleted)
    failure: Failure | None = ending.failure
    if ending.status != "failed" or failure is None:
        return None
    return RunFailure(kind=failure.kind, message=failure.message)


async def load_run_failure(store: Store, run: RunMeta) -> RunFailure | None:
    """Why ``run`` failed (its last record, read alone); None unless it failed.

    Raises:
        CorruptRecordError: the failed run's last record is not its ending.
    """
    if run.status is not RunStatus.FAILED:
        return None
    last = run.last_record_id
    position = record_number(last)
    if position is None:
        raise CorruptRecordError(
            run_id=run.run_id, record_id=last, reason="a failed run without its ending record"
        )
    before = position - 1
    cursor = encode_cursor("run", run.run_id, before) if before else ""
    page = await store.list_run_records(run.run_id, cursor=cursor, limit=1)
    if not page.records or page.records[0].id != last:
        raise CorruptRecordError(
            run_id=run.run_id, record_id=last, reason="the failed run's last record is missing"
        )
    return failure_in(page.records[0])


async def load_run_failures(store: Store, runs: list[RunMeta]) -> dict[str, RunFailure]:
    """:func:`load_run_failure` of each failed run in ``runs``, by run id."""
    out: dict[str, RunFailure] = {}
    for run in runs:
        failure = await load_run_failure(store, run)
        if failure is not None:
            out[run.run_id] = failure
    return out
