"""A session's submitted messages as table rows, the same columns in SQLite and PostgreSQL.

The message bytes are sealed like a tool result of the message's run when the
store encrypts at rest, so an encrypted session keeps no message in plaintext.
Times are passed through ``to_db`` / ``from_db`` (milliseconds in SQLite,
``timestamptz`` in PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from agentledger.errors import CorruptRecordError
from agentledger.storage.types import BusyPolicy, MessageFate, SessionMessage

if TYPE_CHECKING:
    from agentledger.storage.encryption import Encryption

__all__ = ["MESSAGE_COLUMNS", "SEAL_KEY", "message_from_row", "message_values"]

MESSAGE_COLUMNS = (
    "run_id, session_id, pos, turn_id, agent_id, message, if_busy, submitted_at, "
    "requested_after, labels, fate, after_run_id, running_run_id, started"
)
"""Columns of ``session_messages`` in the order of :func:`message_values`."""

SEAL_KEY = "session_message"
"""The call key a message is sealed under (as a tool result of its run)."""

_LABELS = msgspec.json.Decoder(dict[str, str])
_ENCODER = msgspec.json.Encoder()


def message_values(
    message: SessionMessage, to_db: Callable[[datetime], Any], sealer: Encryption | None
) -> tuple[object, ...]:
    """The row of ``message``, its bytes sealed when the store encrypts."""
    data = message.message
    if sealer is not None:
        data = sealer.seal_tool_result(message.session_id, message.run_id, SEAL_KEY, data)
    return (
        message.run_id,
        message.session_id,
        message.position,
        message.turn_id,
        message.agent_id,
        data,
        str(message.if_busy),
        to_db(message.submitted_at),
        message.requested_after,
        _ENCODER.encode(message.labels).decode(),
        str(message.fate),
        message.after,
        message.running_run_id,
        1 if message.started else 0,
    )


def message_from_row(
    row: Sequence[Any], from_db: Callable[[Any], datetime], sealer: Encryption | None
) -> SessionMessage:
    """The message a row stores.

    Raises:
        CorruptRecordError: the row does not decode.
    """
    try:
        data = bytes(row[5])
        if sealer is not None:
            data = sealer.open_tool_result(str(row[1]), str(row[0]), SEAL_KEY, data)
        return SessionMessage(
            run_id=str(row[0]),
            session_id=str(row[1]),
            position=int(row[2]),
            turn_id=str(row[3]),
            agent_id=str(row[4]),
            message=data,
            if_busy=BusyPolicy(row[6]),
            submitted_at=from_db(row[7]),
            requested_after=str(row[8]),
            labels=_LABELS.decode(row[9]),
            fate=MessageFate(row[10]),
            after=str(row[11]),
            running_run_id=str(row[12]),
            started=bool(row[13]),
        )
    except (ValueError, TypeError, msgspec.DecodeError) as e:
        raise CorruptRecordError(
            run_id=str(row[0]), record_id="", reason=f"session message row does not decode: {e}"
        ) from e
