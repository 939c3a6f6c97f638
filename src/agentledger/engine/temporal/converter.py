"""One Temporal data converter for agentledger's msgspec Structs.

Workflow inputs, activity arguments and results are msgspec Structs
(:mod:`agentledger.runtime.wire`). Temporal's default JSON converter knows
dataclasses and pydantic, not msgspec, so :data:`data_converter` puts a msgspec
JSON converter in its place. It decodes with the type hints Temporal reads
from workflow and activity signatures, strictly (wrong types and missing
fields are errors; the activity and workflow messages of
:mod:`agentledger.runtime.wire` ignore fields they do not know, so a newer
worker's message decodes on an older one during a rolling deploy), and keeps
the exact numbers of transcripts: a
:class:`~agentledger.transcript.JsonNumber` is written back as its literal and
an untyped fractional number decodes as one, so a payload that crossed
Temporal is byte-identical to the one that was sent [X1].

The encoding is ``json/plain``: payloads stay readable with ``temporal
workflow show`` and the Web UI.
"""

from __future__ import annotations

from typing import Any

import msgspec
import temporalio.api.common.v1
from temporalio.converter import (
    BinaryNullPayloadConverter,
    BinaryPlainPayloadConverter,
    BinaryProtoPayloadConverter,
    CompositePayloadConverter,
    DataConverter,
    EncodingPayloadConverter,
    JSONProtoPayloadConverter,
)

from agentledger.transcript import JsonNumber

__all__ = ["MsgspecJSONPayloadConverter", "MsgspecPayloadConverter", "data_converter"]

_ENCODING = "json/plain"


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"cannot encode {type(value).__name__} as a Temporal payload")


def _float_hook(literal: str) -> JsonNumber:
    return JsonNumber(literal)


class MsgspecJSONPayloadConverter(EncodingPayloadConverter):
    """``json/plain`` payloads encoded and decoded by msgspec, typed by hints."""

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder(enc_hook=_enc_hook, decimal_format="number")
        self._decoders: dict[Any, msgspec.json.Decoder[Any]] = {}

    @property
    def encoding(self) -> str:
        """The payload ``encoding`` metadata this converter writes and reads."""
        return _ENCODING

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        """Encode any value msgspec can encode (Structs, containers, datetimes ...)."""
        return temporalio.api.common.v1.Payload(
            metadata={"encoding": _ENCODING.encode()}, data=self._encoder.encode(value)
        )

    def from_payload(
        self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None
    ) -> Any:
        """Decode strictly into ``type_hint`` (anything JSON when there is none)."""
        hint: Any = Any if type_hint is None else type_hint
        decoder = self._decoder(hint)
        try:
            return decoder.decode(payload.data)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            name = getattr(hint, "__name__", repr(hint))
            raise RuntimeError(f"payload is not a valid {name}: {e}") from e

    def _decoder(self, hint: Any) -> msgspec.json.Decoder[Any]:
        try:
            decoder = self._decoders.get(hint)
        except TypeError:  # an unhashable hint: build one every time
            return msgspec.json.Decoder(hint, float_hook=_float_hook)
        if decoder is None:
            decoder = self._decoders[hint] = msgspec.json.Decoder(hint, float_hook=_float_hook)
        return decoder


class MsgspecPayloadConverter(CompositePayloadConverter):
    """Temporal's default converters with msgspec JSON in place of the stdlib JSON one."""

    def __init__(self) -> None:
        super().__init__(
            BinaryNullPayloadConverter(),
            BinaryPlainPayloadConverter(),
            JSONProtoPayloadConverter(),
            BinaryProtoPayloadConverter(),
            MsgspecJSONPayloadConverter(),
        )


data_converter = DataConverter(payload_converter_class=MsgspecPayloadConverter)
"""The data converter every agentledger Temporal client and worker uses."""
