"""What ``agentledger token new`` does (the click command is in :mod:`agentledger.cli.service`)."""

from __future__ import annotations

import sys

__all__ = ["parse_labels", "run_token_new"]


def parse_labels(pairs: list[str]) -> dict[str, str]:
    """``K=V`` strings as a dict.

    Raises:
        ValidationError: a pair without ``=`` or with an empty key.
    """
    from agentledger.errors import ValidationError

    labels: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise ValidationError(field="label", expected="K=V", got=pair)
        labels[key] = value
    return labels


def run_token_new(role: str, labels: list[str], tokens: str) -> int:
    """``agentledger token new``: print a fresh token once, add its hash to ``tokens``."""
    from agentledger.errors import AgentledgerError
    from agentledger.service.auth import add_token

    try:
        token = add_token(tokens, role, parse_labels(labels))
    except AgentledgerError as e:
        print(f"agentledger token: error: {e}", file=sys.stderr)
        return 1
    print(token)
    print(
        f"agentledger token: added a {role} token's sha256 to {tokens}; "
        "this is the only time the token is shown",
        file=sys.stderr,
    )
    return 0
