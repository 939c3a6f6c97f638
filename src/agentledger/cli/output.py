"""How every command prints: one JSON style, and plain text that never breaks an id.

JSON (``--json``): field names and order are those of the Python types;
timestamps are UTC with milliseconds and ``Z`` (``2026-12-03T07:00:08.619Z``);
an absent id is ``""`` (as in the types); an absent time (``ended_at`` of an
active session) is ``null``; a record's payload is its JSON value; exact
transcript numbers keep their literal.

Text: aligned columns and trees, each row on one line however long, so ids
stay whole and copyable; only payload previews are shortened, to the
terminal's width (or 60 characters when the output is not a terminal).
"""

from __future__ import annotations

import enum
import shutil
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from agentledger.errors import AgentledgerError
from agentledger.transcript import JsonNumber

__all__ = [
    "columns",
    "dump",
    "echo",
    "echo_json",
    "jsonable",
    "payload_value",
    "preview",
    "preview_room",
    "when",
]

_PAYLOAD = msgspec.json.Decoder(float_hook=JsonNumber)
_PIPE_PREVIEW = 60
"""Preview length when stdout is not a terminal (there is no width to fit)."""


def when(value: datetime | None) -> str | None:
    """A time as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC); None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def payload_value(payload: bytes) -> Any:
    """A record payload as its JSON value (exact numbers), or as text if it is not JSON."""
    try:
        return _PAYLOAD.decode(payload)
    except (msgspec.DecodeError, AgentledgerError):
        return payload.decode("utf-8", "replace")


def jsonable(value: Any) -> Any:
    """``value`` in the CLI's JSON style: structs as objects, times with milliseconds."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        tag = {config.tag_field: config.tag} if config.tag_field and config.tag else {}
        return tag | {name: jsonable(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        return [jsonable(v) for v in value]
    return value


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode())
    raise TypeError(f"cannot print {type(value).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")


def dump(value: Any) -> str:
    """``value`` as one line of JSON in the CLI's style."""
    return _ENCODER.encode(jsonable(value)).decode()


def echo(text: str = "") -> None:
    """Print a line to stdout (flushed, so ``tail`` output appears as it comes)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def echo_json(value: Any) -> None:
    """Print ``value`` as one line of JSON."""
    echo(dump(value))


def preview_room(used: int) -> int:
    """Characters left for a preview on a line whose other columns take ``used``.

    On a terminal the line fits its width (at least 20 characters of preview);
    piped output has no width to fit, so previews get a fixed 60 characters.
    """
    if not sys.stdout.isatty():
        return _PIPE_PREVIEW
    return max(20, shutil.get_terminal_size((80, 24)).columns - used)


def preview(text: str, room: int) -> str:
    """``text`` on one line, cut to ``room`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= room else text[: room - 1] + "…"


def columns(
    header: Sequence[str], rows: Iterable[Sequence[str]], minimum: Sequence[int] = ()
) -> list[str]:
    """Rows as aligned columns under a header; the last column is not padded.

    ``minimum`` widths keep rows printed one at a time (``tail``) aligned.
    """
    table = [list(header), *(list(row) for row in rows)]
    least = [*minimum, *([0] * len(header))]
    sizes = [max(least[i], *(len(row[i]) for row in table)) for i in range(len(header) - 1)]
    return [
        "  ".join(
            [*(cell.ljust(size) for cell, size in zip(row, sizes, strict=False)), row[-1]]
        ).rstrip()
        for row in table
    ]
