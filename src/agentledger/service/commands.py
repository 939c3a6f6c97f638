"""``agentledger serve`` and ``agentledger token new``: argparse wiring, imports on use."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_service_commands", "parse_labels", "run_token_new"]


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


def _serve(args: argparse.Namespace) -> int:
    from agentledger.service.server import run_serve

    return run_serve(args.db, args.listen, args.tokens)


def _token_new(args: argparse.Namespace) -> int:
    return run_token_new(args.role, args.label, args.tokens)


def add_service_commands(subparsers: Any) -> None:
    """Add ``serve`` and ``token`` to the ``agentledger`` command; each sets ``handler``."""
    serve = subparsers.add_parser(
        "serve",
        help="serve a store over HTTP to workers and hosts (the store service)",
        description="Own a SQLite file or a PostgreSQL database and serve it to StoreClients "
        "until SIGINT or SIGTERM (in-flight calls finish, new ones are refused).",
    )
    serve.add_argument(
        "--db", required=True, metavar="PATH_OR_DSN", help="a SQLite file or a postgresql:// DSN"
    )
    serve.add_argument(
        "--listen", default="127.0.0.1:8470", metavar="HOST:PORT", help="(default: %(default)s)"
    )
    serve.add_argument(
        "--tokens", required=True, metavar="FILE", help="the token file (hashes, roles, labels)"
    )
    serve.set_defaults(handler=_serve)
    token = subparsers.add_parser("token", help="manage the store service's bearer tokens")
    actions = token.add_subparsers(dest="action", metavar="ACTION", required=True)
    new = actions.add_parser(
        "new",
        help="print a new token once and add its hash to the token file",
        description="Print a new random bearer token once and add its sha256 to the token file.",
    )
    new.add_argument("--role", required=True, choices=("worker", "host", "reader"))
    new.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="K=V",
        help="scope the token to sessions with this label (repeatable)",
    )
    new.add_argument("--tokens", required=True, metavar="FILE", help="the token file")
    new.set_defaults(handler=_token_new)
