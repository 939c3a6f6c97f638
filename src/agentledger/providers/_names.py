"""Tool names on the wire: canonical tool ids mapped into the providers' charset and back.

Canonical tool ids (``"weather.get"``, ``"files/read"``) may hold characters the
providers refuse: OpenAI, Anthropic and Bedrock all accept only
``[a-zA-Z0-9_-]{1,64}``. The mapping is

* the identity for a name that already fits and does not end like an escaped
  name (``_x`` + 8 hex digits), so ordinary names reach the model unchanged;
* otherwise the name with every other character replaced by ``_``, cut to 54
  characters, plus ``_x`` and the first 8 hex digits of the SHA-256 of the
  canonical name (e.g. ``"weather.get"`` -> ``"weather_get_x3f1c...``).

It is deterministic, so every turn of a conversation sends a tool under the
same wire name, and injective: an identity name never ends like an escaped one,
and two escaped names differ in their hash unless SHA-256 prefixes collide,
which `ToolNames` detects and refuses. `ToolNames` holds the names of one
request (its tools and the tool uses of its transcript) to map the model's
answers back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from agentledger.errors import ValidationError

__all__ = ["ToolNames", "wire_name"]

_FITS = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_ESCAPED = re.compile(r".*_x[0-9a-f]{8}")
_OTHER = re.compile(r"[^a-zA-Z0-9_-]")


def wire_name(name: str) -> str:
    """The provider-safe name of canonical tool id ``name`` (see the module docstring)."""
    if _FITS.fullmatch(name) and not _ESCAPED.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"{_OTHER.sub('_', name)[:54]}_x{digest}"


class ToolNames:
    """The wire names of one request, and the canonical names they stand for.

    Built from every tool name the request mentions; two canonical names that
    would share a wire name are refused, so the way back is never ambiguous.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        """Map each of ``names``.

        Raises:
            ValidationError: two different names map to the same wire name.
        """
        self._canonical: dict[str, str] = {}
        for name in names:
            self.add(name)

    def add(self, name: str) -> str:
        """Map ``name`` and return its wire name.

        Raises:
            ValidationError: another name already holds the same wire name.
        """
        wire = wire_name(name)
        known = self._canonical.setdefault(wire, name)
        if known != name:
            raise ValidationError(
                field="tools.name",
                expected="tool names with distinct wire names",
                got=[known, name],
                message=f"tool names {known!r} and {name!r} both map to wire name {wire!r}",
            )
        return wire

    def canonical(self, wire: str) -> str:
        """The canonical name behind ``wire``; an unknown name comes back unchanged.

        A model may call a tool that does not exist; its name is passed on as
        the model wrote it so the runtime can answer with an unknown-tool error.
        """
        return self._canonical.get(wire, wire)
