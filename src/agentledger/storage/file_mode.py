"""The files agentledger creates: owner-only unless configured otherwise, and named durably.

Databases, their WAL files, key vaults and lock files hold (or guard) what a
store keeps, so they are created ``0600``, like token files and keyrings. Set
``AGENTLEDGER_FILE_MODE`` (octal, e.g. ``0640``) to share them with a group.
SQLite gives a database's WAL, shared-memory and journal files the mode of
the database itself, so creating the database file is enough.

A new name (a created, linked or renamed file, a new directory) survives a
power loss only once its directory is fsynced: :func:`sync_directory` after
``os.replace``, :func:`make_directories` instead of ``mkdir -p``.
"""

from __future__ import annotations

import os

from agentledger.errors import ValidationError

__all__ = ["FILE_MODE_ENV", "create_private", "file_mode", "make_directories", "sync_directory"]

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


def sync_directory(path: str | os.PathLike[str]) -> None:
    """Fsync the directory ``path``: the names made in it so far survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directories(path: str | os.PathLike[str]) -> None:
    """``mkdir -p path``, each new directory's name synced into its parent.

    Without that sync a power loss can take the new directory away with every
    file already written (and fsynced) into it.
    """
    missing = []
    here = os.path.abspath(path)
    while not os.path.isdir(here):
        missing.append(here)
        here = os.path.dirname(here)
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
        sync_directory(os.path.dirname(directory))
