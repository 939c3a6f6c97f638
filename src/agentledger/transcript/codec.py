"""Strict JSON codec for transcript messages ([T4]).

Stored transcripts must read back exactly as written, so decoding refuses
anything it cannot represent faithfully: unknown keys, missing required keys,
an unknown or missing ``kind``, wrong types, a second JSON value after the first,
invalid UTF-8, deeply nested input, and any part that breaks its invariants.
Every refusal is a `TranscriptError` whose ``field`` is the JSON path of the
problem (``$.parts[2].data``, or ``$[3].parts[0]`` for a list of messages), with
``message_index``/``part_index`` set when the path names them; the msgspec error
is chained as ``__cause__``.

Numbers: integers decode as ``int``; every number with a fraction or exponent
decodes as a `JsonNumber` and is encoded back as its literal, so ``0.1``,
``1e400`` and ``-0.0`` round-trip byte for byte. Callers' floats encode in their
shortest form; ``Decimal``s encode as JSON numbers. Bytes are base64.

Input is ``bytes``, ``bytearray`` or a contiguous ``memoryview`` of UTF-8 JSON.
A ``str`` is refused rather than silently re-encoded: the stored form is bytes
and UTF-8 validity is part of the contract, so the caller encodes explicitly.
msgspec itself rejects invalid UTF-8 everywhere in a JSON text (inside strings
and keys, and as a stray byte outside them); the tests pin that.

Known limit: a key repeated inside one JSON object is not detected; the last
value wins (as in msgspec and the standard ``json`` module).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NoReturn

import msgspec

from agentledger.errors import TranscriptError
from agentledger.transcript.messages import Message
from agentledger.transcript.numbers import JsonNumber
from agentledger.transcript.parts import InvariantError, verified_decoding

__all__ = ["decode_message", "decode_messages", "encode_message", "encode_messages"]

Buffer = bytes | bytearray | memoryview


def _float_hook(literal: str) -> JsonNumber:
    """Keep a fractional/exponent number as its exact literal (the decoder's float hook)."""
    try:
        return JsonNumber._from_json(literal)
    except ArithmeticError as e:
        # A ValueError so msgspec reports it with the JSON path.
        raise ValueError(f"number {literal[:40]!r} is out of range") from e


def _enc_hook(value: Any) -> Any:
    """Write a `JsonNumber` back as its literal; refuse any other unknown object."""
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TranscriptError(field="$", expected="a JSON-encodable value", got=value)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")
_MESSAGE_DECODER = msgspec.json.Decoder(Message, float_hook=_float_hook)
_MESSAGES_DECODER = msgspec.json.Decoder(list[Message], float_hook=_float_hook)

_AT = re.compile(r"(?P<problem>.*?) - at `(?P<path>\$.*)`", re.DOTALL)
_ONE_INDEXES = re.compile(r"\$()(?:\.parts\[(\d+)\])?")
_MANY_INDEXES = re.compile(r"\$\[(\d+)\](?:\.parts\[(\d+)\])?")
_UNKNOWN_KEY = re.compile(r"Object contains unknown field `(?P<key>.*)`", re.DOTALL)
_MISSING_KEY = re.compile(r"Object missing required field `(?P<key>.*)`", re.DOTALL)
_WRONG_TYPE = re.compile(r"Expected `(?P<expected>[^`]*)`(?:, got `(?P<got>[^`]*)`)?")
_ENUMS = {"role": "one of system, user, assistant", "format": "one of png, jpeg, gif, webp"}
_KINDS = "thinking, text, image, document, citations, tool_use, tool_result, cache_checkpoint"


def _key_path(path: str, key: str) -> str:
    """Append an object key to a JSON path."""
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _short(value: object) -> str:
    """Render a value for an error message on one short line."""
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _utf8_offset(data: Buffer) -> str:
    """Where the first invalid UTF-8 byte is, for the error message (error path only)."""
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        return f" (byte {e.start})"
    return ""


def _raise_decode_error(error: msgspec.DecodeError, data: Buffer, many: bool) -> NoReturn:
    """Turn a msgspec error into a `TranscriptError` naming the JSON path and the problem."""
    text = str(error)
    match = _AT.fullmatch(text)
    path, problem = (match["path"], match["problem"]) if match else ("$", text)
    field, expected, got = path, "valid transcript JSON", problem
    cause = error.__cause__
    if isinstance(cause, InvariantError):
        field = f"{path}.{cause.relative_field}"
        expected, got = cause.expected, cause.got
        problem = f"expected {expected}, got {_short(got)}"
    elif (found := _UNKNOWN_KEY.fullmatch(problem)) is not None:
        field, expected, got = _key_path(path, found["key"]), "no unknown keys", found["key"]
    elif (found := _MISSING_KEY.fullmatch(problem)) is not None:
        field, expected, got = _key_path(path, found["key"]), "a required key", "missing"
    elif (found := _WRONG_TYPE.fullmatch(problem)) is not None:
        expected, got = found["expected"], found["got"]
    elif path.endswith(".kind") and problem.startswith("Invalid value"):
        expected = f"a part kind ({_KINDS})"
    elif problem.startswith("Invalid enum value"):
        expected = _ENUMS.get(path.rpartition(".")[2], "a known value")
    elif problem.startswith("Invalid UTF-8"):
        problem += _utf8_offset(data)
        expected = "valid UTF-8"
    indexes = (_MANY_INDEXES if many else _ONE_INDEXES).match(path)
    message_index = part_index = None
    if indexes is not None:
        message_index = int(indexes[1]) if indexes[1] else None
        part_index = int(indexes[2]) if indexes[2] else None
    raise TranscriptError(
        field=field,
        expected=expected,
        got=got,
        message=f"invalid transcript JSON at {field}: {problem}",
        message_index=message_index,
        part_index=part_index,
    ) from error


def _decode(decoder: msgspec.json.Decoder[Any], data: Buffer, many: bool) -> Any:
    """Run a strict decoder, turning every failure into a `TranscriptError`."""
    if not isinstance(data, bytes | bytearray | memoryview):
        hint = "; encode a str with .encode('utf-8') first" if isinstance(data, str) else ""
        raise TranscriptError(
            field="$",
            expected="bytes, bytearray or memoryview of UTF-8 JSON",
            got=type(data).__name__,
            message=f"cannot decode a {type(data).__name__}: expected UTF-8 JSON bytes{hint}",
        )
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as e:
        _raise_decode_error(e, data, many)
    except RecursionError as e:
        raise TranscriptError(
            field="$",
            expected="JSON nested less deeply",
            got="too deep",
            message=f"invalid transcript JSON at $: nested too deeply ({e})",
        ) from e
    except BufferError as e:
        raise TranscriptError(
            field="$", expected="a contiguous buffer", got=type(data).__name__, message=str(e)
        ) from e


def _encode(value: object) -> bytes:
    """Encode with the shared encoder, turning every failure into a `TranscriptError`."""
    try:
        return _ENCODER.encode(value)
    except TranscriptError:
        raise
    except (msgspec.EncodeError, ValueError, TypeError, OverflowError, RecursionError) as e:
        # e.g. a str holding a lone surrogate, or an int over Python's 4300-digit limit.
        raise TranscriptError(
            field="$", expected="a JSON-encodable transcript", got=str(e), message=str(e)
        ) from e


def encode_message(message: Message) -> bytes:
    """Encode one message as compact JSON (defaults omitted).

    Raises:
        TranscriptError: ``message`` is not a `Message`, or holds a value JSON
            cannot carry (a str with a lone surrogate, an oversized int).
    """
    if not isinstance(message, Message):
        raise TranscriptError(field="message", expected="a Message", got=message)
    return _encode(message)


def encode_messages(messages: Iterable[Message]) -> bytes:
    """Encode messages as one JSON array, in order.

    Raises:
        TranscriptError: an element is not a `Message` (``message_index`` set), or
            a value JSON cannot carry.
    """
    items = list(messages)
    for index, message in enumerate(items):
        if not isinstance(message, Message):
            raise TranscriptError(
                field=f"messages[{index}]",
                expected="a Message",
                got=message,
                message_index=index,
            )
    return _encode(items)


def decode_message(data: Buffer) -> Message:
    """Decode exactly one message from UTF-8 JSON bytes, strictly.

    Raises:
        TranscriptError: anything listed in the module docstring; ``field`` is
            the JSON path, ``part_index`` is set when one part is to blame.
    """
    message: Message = _decode(_MESSAGE_DECODER, data, False)
    return message


def decode_messages(data: Buffer) -> list[Message]:
    """Decode a JSON array of messages from UTF-8 JSON bytes, strictly.

    Raises:
        TranscriptError: anything listed in the module docstring; ``field`` is
            the JSON path, ``message_index``/``part_index`` name the culprit.
    """
    messages: list[Message] = _decode(_MESSAGES_DECODER, data, True)
    return messages


def decode_verified_messages(payloads: Iterable[Buffer]) -> list[Message]:
    """Decode stored message arrays whose invariants were checked when they were written.

    Only for payloads a store returned after verifying their checksums, when
    that store validated every transcript record on write (see
    ``storage.protocol.VerifiedTranscripts``). msgspec still checks every
    field's type, every tag and every key, so a malformed array is still a
    `TranscriptError`; what is skipped is re-running the parts'
    ``__post_init__`` invariants on bytes that passed them once. Anything from
    an untrusted source goes through :func:`decode_messages`.

    Raises:
        TranscriptError: a payload that is not a message array.
    """
    messages: list[Message] = []
    decode = _MESSAGES_DECODER.decode
    with verified_decoding():
        for data in payloads:
            if type(data) is bytes:  # what a store returns: straight to msgspec
                try:
                    messages += decode(data)
                    continue
                except (msgspec.DecodeError, RecursionError):
                    pass  # decoded again below, for the error that names the problem
            messages += _decode(_MESSAGES_DECODER, data, True)
    return messages
