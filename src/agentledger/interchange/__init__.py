"""Sessions in and out of agentledger [G4]: a portable JSON Lines format, and importers
that bring conversations kept by other frameworks' session stores.

:func:`export_session` writes an ended session as the documented, versioned
``agentledger-session`` JSON Lines format and :func:`import_session_file` reads
one back, checked like a restore and written in one transaction (an archive
stays the self-verifying backup; this format is for people and other tools).
:func:`session_schema` is the format's JSON Schema. See ``docs/format.md``.
"""

from __future__ import annotations

from agentledger.interchange.jsonl import (
    FORMAT,
    FORMAT_VERSION,
    ImportOutcome,
    SessionFileHeader,
    decode_session,
    encode_session,
    export_session,
    import_image,
    import_session_file,
    is_session_file,
    session_schema,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ImportOutcome",
    "SessionFileHeader",
    "decode_session",
    "encode_session",
    "export_session",
    "import_image",
    "import_session_file",
    "is_session_file",
    "session_schema",
]
