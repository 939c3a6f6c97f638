"""The transcript model: messages, parts, a strict JSON codec and validators.

A transcript is an ordered list of `Message`\\ s, each an ordered tuple of parts
([T1]-[T3]). Everything is an immutable msgspec Struct whose invariants hold
whether it was built in Python or decoded from JSON, and a stored transcript
reads back exactly as written ([T4]).

Numbers: JSON integers decode as ``int``; every other JSON number decodes as a
`JsonNumber`, a ``Decimal`` that keeps its literal and is encoded back verbatim
(``0.1``, ``1e400``, ``-0.0`` round-trip byte for byte). A `JsonNumber` compares
equal by value, to ``Decimal``/``int`` and to the ``float`` whose shortest
spelling has that value, so a message holding a float equals its decoded copy.

Example:
    >>> from agentledger.transcript import Message, TextPart, encode_message
    >>> encode_message(Message(role="user", parts=(TextPart(text="hi"),)))
    b'{"role":"user","parts":[{"kind":"text","text":"hi"}]}'
"""

from typing import TYPE_CHECKING, Any

from agentledger.transcript.codec import (
    decode_message,
    decode_messages,
    encode_message,
    encode_messages,
)
from agentledger.transcript.messages import Message, Role
from agentledger.transcript.numbers import JsonNumber
from agentledger.transcript.parts import (
    CacheCheckpointPart,
    Citation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)
from agentledger.transcript.validate import validate_bedrock, validate_planner_transcript

if TYPE_CHECKING:  # loaded on first use (see __getattr__): replay reads a store
    from agentledger.storage.replay import (
        build_messages_from_run_log,
        replay_run_log_events,
    )

__all__ = [
    "CacheCheckpointPart",
    "Citation",
    "CitationsPart",
    "DocumentPart",
    "ImagePart",
    "JsonNumber",
    "Message",
    "Part",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolResultPart",
    "ToolUsePart",
    "build_messages_from_run_log",
    "decode_message",
    "decode_messages",
    "encode_message",
    "encode_messages",
    "replay_run_log_events",
    "validate_bedrock",
    "validate_planner_transcript",
]

_REPLAY = frozenset({"build_messages_from_run_log", "replay_run_log_events"})


def __getattr__(name: str) -> Any:
    """Replay reads a store, so it lives in :mod:`agentledger.storage.replay`; it is named
    here too, loaded on first use, so this package never imports the storage one."""
    if name in _REPLAY:
        from agentledger.storage import replay

        return getattr(replay, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
