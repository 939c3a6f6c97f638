"""Checks around the transactions: write sizes, and the lifecycle records of a listed page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentledger.errors import (
    CorruptRecordError,
    ValidationError,
)
from agentledger.storage import payloads
from agentledger.storage.lifecycle.reads import TERMINAL_STATUSES
from agentledger.storage.types import (
    Checkpoint,
    Record,
    RunStatus,
)
from agentledger.storage.validation import (
    SizeLimits,
    decode_stored_payload,
)

_RECORD_FIELDS = tuple(
    (name, f"{name}.payload") for name in ("started", "canceled", "parent_linked", "record")
)


def check_sizes(command: object, limits: SizeLimits) -> None:
    """Every payload and checkpoint of a write command within the store's ``limits``.

    ``command`` is any write command, a Record, a sequence of Records or
    anything with a ``records`` sequence (a batch as sent); parts that are not
    bytes are left to the other checks. Every plan runs this first, with the
    limits its store was opened with; a client that knows them runs it before
    sending. The first part over its cap is refused.

    Raises:
        ValidationError: naming the field, the cap and the size found.
    """
    cap = limits.max_payload_bytes
    if isinstance(command, Record):  # an append: the hot path
        payload = command.payload
        if isinstance(payload, bytes) and len(payload) > cap:  # _over, inline
            _within("record.payload", payload, cap)
        return
    batch = getattr(command, "records", command)
    if isinstance(batch, Sequence) and not isinstance(batch, str | bytes):
        for i, record in enumerate(batch):
            if isinstance(record, Record) and _over(record.payload, cap):
                _within(f"records[{i}].payload", record.payload, cap)
    for name, field in _RECORD_FIELDS:
        record = getattr(command, name, None)
        if isinstance(record, Record):
            _within(field, record.payload, cap)
    checkpoint = getattr(command, "checkpoint", None)
    if isinstance(checkpoint, Checkpoint):
        _within("checkpoint.data", checkpoint.data, limits.max_checkpoint_bytes)


def _over(data: object, cap: int) -> bool:
    return isinstance(data, bytes) and len(data) > cap


def _within(field: str, data: object, cap: int) -> None:
    if _over(data, cap):
        assert isinstance(data, bytes)
        raise ValidationError(
            field=field,
            expected=f"at most {cap} bytes (this store's limit)",
            got=f"{len(data)} bytes",
        )


_LIFECYCLE_PAYLOADS: dict[
    str,
    type[payloads.RunStarted]
    | type[payloads.RunCompleted]
    | type[payloads.RunSuspended]
    | type[payloads.ChildRunLinked]
    | type[payloads.CancellationIntent],
] = {
    payloads.RUN_STARTED: payloads.RunStarted,
    payloads.RUN_COMPLETED: payloads.RunCompleted,
    payloads.RUN_SUSPENDED: payloads.RunSuspended,
    payloads.CHILD_RUN_LINKED: payloads.ChildRunLinked,
    payloads.CANCELLATION_INTENT: payloads.CancellationIntent,
}


def completed_runs(records: Sequence[Record]) -> set[str]:
    """The runs whose ``run_completed`` is among ``records``: :func:`check_listed` needs
    their statuses."""
    return {record.run_id for record in records if record.type == payloads.RUN_COMPLETED}


def check_listed(
    records: Sequence[Record],
    statuses: Mapping[str, RunStatus | None],
    *,
    ends_log: bool = False,
) -> None:
    """[J1] a listed page's lifecycle records decode strictly and fit their runs.

    Ordinary records are checked by their checksum; only the few lifecycle
    records are decoded here. ``statuses`` holds the status of each run of
    :func:`completed_runs` (None: purged since), which its ``run_completed``
    must agree with. ``ends_log``: the page (of one run) reaches the run's
    newest record, which for an ended run must be its ``run_completed``.

    Raises:
        CorruptRecordError: naming the run, the record and what is wrong.
    """
    for record in records:
        cls = _LIFECYCLE_PAYLOADS.get(record.type)
        if cls is None:
            continue
        payload = decode_stored_payload(record, cls)
        if isinstance(payload, payloads.RunCompleted):
            status = statuses.get(record.run_id)
            if status is None:  # purged since the page was read
                continue
            if TERMINAL_STATUSES.get(status) != (payload.status, payload.phase):
                raise CorruptRecordError(
                    run_id=record.run_id,
                    record_id=record.id,
                    reason=(
                        f"contradicts its run ({status.value}): run_completed says "
                        f"status {payload.status!r}, phase {payload.phase!r}"
                    ),
                )
    if not (ends_log and records):
        return
    last = records[-1]
    status = statuses.get(last.run_id)
    if status is not None:
        check_log_end(last.run_id, status, last.id, last.type)


_ENDING_TYPES = {
    **dict.fromkeys(TERMINAL_STATUSES, payloads.RUN_COMPLETED),
    RunStatus.SUSPENDED: payloads.RUN_SUSPENDED,
}


def check_log_end(run_id: str, status: RunStatus, last_id: str, last_type: str | None) -> None:
    """[J1] the newest record of a run that has ended is the record that ended it.

    A deleted ``run_completed`` (or ``run_suspended``) leaves a log that merely
    looks shorter; this is what makes it loud. ``last_id`` and ``last_type``
    are the newest record's; ``last_type`` is None when the run has no record.

    Raises:
        CorruptRecordError: naming the run, its newest record and what is wrong.
    """
    ending = _ENDING_TYPES.get(status)
    if ending is None:
        return
    if last_type is None:
        raise CorruptRecordError(
            run_id=run_id, record_id="1", reason=f"the run is {status.value} but has no records"
        )
    if last_type != ending:
        raise CorruptRecordError(
            run_id=run_id,
            record_id=last_id,
            reason=(
                f"the run is {status.value} but its log ends with this {last_type!r} "
                f"record, not its {ending}"
            ),
        )
