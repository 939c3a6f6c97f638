"""Encryption at rest with crypto-erasure [A2]: keyring, data-key vault and sealing.

Record payloads and checkpoint data are sealed with AES-256-GCM under a
per-session data key; data keys are wrapped by a key-encryption key from a
:class:`Keyring` and kept in a vault file outside the database, so erasing a
session's key makes its data unreadable in the database and in every backup
or archive made before. See ``docs/retention.md`` ("Encryption at rest").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentledger.storage.encryption.binding import SCHEME
from agentledger.storage.encryption.keyring import KEYRING_ENV, Keyring

if TYPE_CHECKING:
    from agentledger.storage.encryption.sealer import Encryption

__all__ = ["KEYRING_ENV", "SCHEME", "Encryption", "Keyring"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so the backends (which only check bindings) never need cryptography.
    if name == "Encryption":
        try:
            from agentledger.storage.encryption.sealer import Encryption
        except ImportError as e:
            from agentledger._extras import needs_extra

            raise needs_extra("encryption at rest", "encryption", e) from e
        return Encryption
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
