"""Vault reads kept off an event loop [A2]: a data key not in memory is loaded in a thread.

The vault is a SQLite file; reading it (or making a key, which commits with
fsync, or waiting out another process's lock) blocks. An async backend runs
each operation inside :func:`deferring_vault_reads`: there, a key that is not
in memory raises :class:`KeyNeeded` instead of being read. The backend
abandons the operation (its transaction is rolled back, nothing is
committed), awaits ``Encryption.load_key`` (a worker thread), and runs the
operation again, which now finds the key in memory.

No ``cryptography`` here: backends import this module without the extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from agentledger.errors import AgentledgerError

__all__ = ["KeyNeeded", "deferred", "deferring_vault_reads"]

_DEFERRED: ContextVar[bool] = ContextVar("agentledger_deferred_vault_reads", default=False)


class KeyNeeded(AgentledgerError):
    """A data key is not in memory while vault reads are deferred; see the module docstring.

    The store that deferred the read catches it and loads the key; it reaches a
    caller only through a custom store that defers reads and does not.
    """

    def __init__(self, *, scope: str, create: bool) -> None:
        super().__init__(f"the data key of {scope} is not loaded")
        self.scope = scope
        """The key's scope: ``"session:<id>"`` or ``"run:<id>"``."""
        self.create = create
        """Whether the operation makes the key if the vault has none."""


def deferred() -> bool:
    """Whether vault reads are deferred in the current context."""
    return _DEFERRED.get()


@contextlib.contextmanager
def deferring_vault_reads() -> Iterator[None]:
    """Within it, a data key not in memory raises :class:`KeyNeeded` instead of being read."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)
