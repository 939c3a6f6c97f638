"""Exact JSON numbers for tool inputs, tool results and provider metadata ([T4]).

A float would round ``0.1`` to a binary neighbour and overflow ``1e400`` to
infinity, so a stored transcript would not read back as it was written. The
codec therefore decodes every JSON number with a fraction or an exponent as a
`JsonNumber`: a `decimal.Decimal` that also remembers its JSON literal and is
encoded back as exactly that literal. Integers stay Python ``int`` (arbitrary
precision, up to Python's 4300-digit conversion limit).

Equality is by value, not by spelling:

* ``JsonNumber("1.0") == JsonNumber("1.00") == Decimal("1") == 1``;
* compared with a ``float`` it equals the float's shortest decimal spelling,
  so ``JsonNumber("0.1") == 0.1`` — the value a caller's float becomes after an
  encode/decode round trip compares equal to the float it came from.

Because a ``Decimal`` and a ``float`` can be equal to the same `JsonNumber`
without being equal to each other, the hash follows ``Decimal`` (and so ``int``)
and not ``float``: do not mix JsonNumbers and floats as set members or dict keys.
Arithmetic on a JsonNumber returns a plain ``Decimal``; only the literal of an
unchanged value is kept.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from agentledger.errors import TranscriptError

__all__ = ["JsonNumber"]

# RFC 8259 number grammar; the literal is written back verbatim, so it must be valid JSON.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class JsonNumber(Decimal):
    """A JSON number kept exactly as written, with the value of a ``Decimal``.

    Exists so ``0.1``, ``1e400`` and ``-0.0`` survive decode and encode as the
    same JSON text: the codec writes `literal` back unchanged.
    """

    __slots__ = ("_literal",)
    _literal: str
    # The JSON text this number was read from (or built with); written back verbatim.

    def __new__(cls, literal: str) -> JsonNumber:
        """Build a number from its JSON literal, e.g. ``JsonNumber("1e400")``.

        Raises:
            TranscriptError: ``literal`` is not a JSON number literal or its
                exponent is beyond what ``Decimal`` can hold.
        """
        if type(literal) is not str or _JSON_NUMBER.fullmatch(literal) is None:
            raise TranscriptError(
                field="JsonNumber.literal", expected="a JSON number literal", got=literal
            )
        try:
            return cls._from_json(literal)
        except ArithmeticError as e:
            raise TranscriptError(
                field="JsonNumber.literal", expected="a number Decimal can hold", got=literal
            ) from e

    @classmethod
    def _from_json(cls, literal: str) -> JsonNumber:
        """Build from a literal the JSON parser already checked (the decoder's float hook).

        Raises:
            ArithmeticError: the exponent is out of ``Decimal``'s range.
        """
        number = Decimal.__new__(cls, literal)
        number._literal = literal
        return number

    @property
    def literal(self) -> str:
        """The exact JSON text of this number."""
        return self._literal

    def __eq__(self, other: object) -> bool:
        # A float equals its shortest spelling, which is what the encoder writes for it.
        if isinstance(other, float):
            return Decimal.__eq__(self, Decimal(repr(other)))
        return Decimal.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        # Decimal answers NotImplemented for non-numbers; pass that on, never negate it.
        return equal if equal is NotImplemented else not equal

    __hash__ = Decimal.__hash__

    def __repr__(self) -> str:
        return f"JsonNumber({self._literal!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Decimal's own reduce would rebuild from str(self) and lose the spelling.
        return (JsonNumber, (self._literal,))

    def __copy__(self) -> JsonNumber:
        return self

    def __deepcopy__(self, memo: object) -> JsonNumber:
        return self
