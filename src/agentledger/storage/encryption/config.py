"""Where a process finds its keyring and vault: explicit paths, else the environment.

``$AGENTLEDGER_KEYRING_FILE`` (a keyring file) or ``$AGENTLEDGER_KEYRING`` (its
JSON text), and ``$AGENTLEDGER_VAULT`` (the vault file). Neither set: no
encryption. One without the other is an error, never a silent plaintext open.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agentledger.errors import ValidationError
from agentledger.storage.encryption.keyring import KEYRING_ENV, Keyring

if TYPE_CHECKING:
    from agentledger.storage.encryption.sealer import Encryption

__all__ = ["KEYRING_FILE_ENV", "VAULT_ENV", "configured_encryption"]

KEYRING_FILE_ENV = "AGENTLEDGER_KEYRING_FILE"
VAULT_ENV = "AGENTLEDGER_VAULT"


def configured_encryption(
    keyring_file: str | None = None, vault: str | None = None
) -> Encryption | None:
    """The Encryption the arguments (else the environment) name; None if none is named.

    Raises:
        ValidationError: a keyring without a vault or the other way round, or a
            keyring that cannot be read.
    """
    keyring_file = keyring_file or os.environ.get(KEYRING_FILE_ENV) or None
    vault = vault or os.environ.get(VAULT_ENV) or None
    keyring = Keyring.from_file(keyring_file) if keyring_file else Keyring.from_env(KEYRING_ENV)
    if keyring is None and vault is None:
        return None
    if keyring is None or vault is None:
        missing = (
            "--vault / $AGENTLEDGER_VAULT"
            if vault is None
            else "--keyring / $" + (KEYRING_FILE_ENV)
        )
        raise ValidationError(
            field="encryption", expected="a keyring and a vault together", got=f"no {missing}"
        )
    from agentledger.storage.encryption.sealer import Encryption

    return Encryption(keyring, vault)
