"""Whether a database and an ``encryption`` argument fit: decided once for every backend.

An encrypted database records the scheme and the id of its vault. Opening it
without encryption, or with another vault, is refused; so is opening a
plaintext database that holds data with encryption (existing plaintext data
is never converted). An empty plaintext database becomes encrypted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentledger.errors import ValidationError

if TYPE_CHECKING:
    from agentledger.storage.encryption.sealer import Encryption

__all__ = ["SCHEME", "bind"]

SCHEME = "aes-256-gcm/v1"
"""What an encrypted database records about itself."""


def bind(
    encryption: Encryption | None, recorded: tuple[str, str] | None, *, has_data: bool
) -> tuple[str, str] | None:
    """The ``(scheme, vault_id)`` the database must now record, or None if it records nothing new.

    ``recorded`` is what the database recorded (None: plaintext so far).

    Raises:
        ValidationError: ``field="encryption"`` for an encrypted database opened
            without a keyring (or the other way round, with data); ``field="vault"``
            for another vault.
    """
    if recorded is not None:
        scheme, vault_id = recorded
        if encryption is None:
            raise ValidationError(
                field="encryption",
                expected="a keyring and vault (Encryption): this database is encrypted",
                got=None,
                message="this database is encrypted: open it with its keyring and vault "
                "($AGENTLEDGER_KEYRING_FILE or $AGENTLEDGER_KEYRING, and $AGENTLEDGER_VAULT; "
                "--keyring and --vault where a command takes them; encryption= in Python)",
            )
        if scheme != SCHEME:
            raise ValidationError(field="encryption", expected=f"scheme {SCHEME}", got=scheme)
        encryption.attach(vault_id)
        return None
    if encryption is None:
        return None
    if has_data:
        raise ValidationError(
            field="encryption",
            expected="an empty or already encrypted database (plaintext data is not converted)",
            got="a plaintext database with data",
        )
    return (SCHEME, encryption.attach(None))
