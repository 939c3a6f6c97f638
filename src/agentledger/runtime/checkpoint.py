"""The suspension checkpoint: what a suspended run needs to be continued [L6].

Stored as the private bytes of the store's ``Checkpoint``. It is versioned
and decoded strictly: a checkpoint of an unknown version, with unknown or
missing fields, or not JSON at all is refused, never guessed at, because a
continuation built from a misread checkpoint would answer the wrong question.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agentledger.errors import ValidationError
from agentledger.runtime.planner import Await, AwaitClarification, ToolCall
from agentledger.runtime.records import decode_json, encode_json

__all__ = ["CHECKPOINT_VERSION", "RunCheckpoint"]

CHECKPOINT_VERSION = 1
"""The version this runtime writes and reads."""


class RunCheckpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Why a run suspended and which tool calls (if any) wait for an answer."""

    version: int
    """Checkpoint format version; only :data:`CHECKPOINT_VERSION` is read."""
    agent_id: str
    """The agent that suspended (a continuation must be the same agent [K1])."""
    turn: int
    """The planner turn that asked for outside input."""
    awaiting: Await
    """What the run waits for: a clarification, a confirmation or external tool results."""

    @property
    def kind(self) -> Literal["clarification", "confirmation", "external_tools"]:
        """The kind of input awaited."""
        if isinstance(self.awaiting, AwaitClarification):
            return "clarification"
        return (
            "confirmation"
            if self.awaiting.__struct_config__.tag == "confirmation"
            else "external_tools"
        )

    @property
    def pending(self) -> tuple[ToolCall, ...]:
        """Tool calls whose tool_use is in the transcript without a result yet."""
        if isinstance(self.awaiting, AwaitClarification):
            return ()
        return self.awaiting.calls

    def encode(self) -> bytes:
        """The checkpoint's bytes."""
        return encode_json(self)

    @classmethod
    def decode(cls, data: bytes) -> RunCheckpoint:
        """Decode exactly one checkpoint of the current version.

        Raises:
            ValidationError: anything else (``field="checkpoint"``).
        """
        try:
            version = _VERSION.decode(data).version
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise ValidationError(
                field="checkpoint", expected="a run checkpoint", got=str(e)
            ) from e
        if version != CHECKPOINT_VERSION:
            raise ValidationError(
                field="checkpoint.version", expected=str(CHECKPOINT_VERSION), got=version
            )
        try:
            checkpoint: RunCheckpoint = decode_json(data, RunCheckpoint)
            return checkpoint
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise ValidationError(
                field="checkpoint", expected="a run checkpoint", got=str(e)
            ) from e


class _Version(msgspec.Struct, frozen=True):
    """Just the version, read first so a newer format is named as such."""

    version: int


_VERSION = msgspec.json.Decoder(_Version)
