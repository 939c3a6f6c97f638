"""The transcript message ([T1]): a role and its ordered parts.

Order is the transcript's meaning ([T3]), so ``parts`` is an immutable tuple and
nothing in agentledger ever reorders it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from agentledger.transcript.parts import (
    PART_TYPES,
    Part,
    check_json,
    checks_skipped,
    fail_invariant,
)

__all__ = ["Message", "Role"]

Role: TypeAlias = Literal["system", "user", "assistant"]
"""Who wrote a message."""

_ROLES = frozenset(("system", "user", "assistant"))


class Message(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    repr_omit_defaults=True,
    gc=False,
):
    """One message of a transcript: who wrote it and what it holds, in order.

    The unit that is stored, replayed and sent to providers; JSON shape
    ``{"role": .., "parts": [..], "meta": ..}`` with ``meta`` omitted when None.

    Not tracked by the garbage collector (nor are the parts that hold only text,
    bytes and numbers): a message is frozen and its values are JSON, which holds no
    reference cycle, and a replay of 10,000 messages then sets off no collection of
    everything else the process holds. A cycle made by putting a message into its
    own ``meta`` (or a tool part's ``input``) after the fact would never be freed.
    """

    role: Role
    """``"system"``, ``"user"`` or ``"assistant"``."""
    parts: tuple[Part, ...]
    """The message content in its original order (a tuple, never reordered)."""
    meta: dict[str, Any] | None = None
    """Provider replay data (a plain JSON object), or None."""

    def __post_init__(self) -> None:
        if checks_skipped():
            return
        if not isinstance(self.role, str) or self.role not in _ROLES:
            fail_invariant("Message", "role", "one of system, user, assistant", self.role)
        if type(self.parts) is not tuple:
            fail_invariant("Message", "parts", "a tuple of parts", self.parts)
        for index, part in enumerate(self.parts):
            if not isinstance(part, PART_TYPES):
                fail_invariant("Message", f"parts[{index}]", "a transcript part", part)
        if self.meta is not None:
            if type(self.meta) is not dict:
                fail_invariant("Message", "meta", "a JSON object (dict) or None", self.meta)
            check_json("Message", "meta", self.meta)
