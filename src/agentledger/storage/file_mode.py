"""The permissions of the files agentledger creates: owner-only unless configured otherwise.

Databases, their WAL files, key vaults and lock files hold (or guard) what a
store keeps, so they are created ``0600``, like token files and keyrings. Set
``AGENTLEDGER_FILE_MODE`` (octal, e.g. ``0640``) to share them with a group.
SQLite gives a database's WAL, shared-memory and journal files the mode of
the database itself, so creating the database file is enough.
"""

from __future__ import annotations

import os

from agentledger.errors import ValidationError

__all__ = ["FILE_MODE_ENV", "create_private", "file_mode"]

FILE_MODE_ENV = "AGENTLEDGER_FILE_MODE"
"""The environment variable that overrides the mode of new files (octal)."""

_DEFAULT = 0o600


def file_mode() -> int:
    """The mode new files get: ``$AGENTLEDGER_FILE_MODE`` (octal), else ``0600``.

    Raises:
        ValidationError: the variable is not an octal mode of read/write bits.
    """
    text = os.environ.get(FILE_MODE_ENV, "").strip()
    if not text:
        return _DEFAULT
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o666:
        raise ValidationError(
            field=FILE_MODE_ENV, expected="an octal file mode such as 0600 or 0640", got=text
        )
    return mode


def create_private(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty with :func:`file_mode` unless something is there already.

    A file that exists keeps its mode: the operator may have chosen it. A file
    that cannot be created is left to the caller's own open to report.
    """
    mode = file_mode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError:
        return
    try:
        os.fchmod(fd, mode)  # exactly the mode asked for, whatever the umask
    finally:
        os.close(fd)
