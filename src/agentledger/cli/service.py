"""``agentledger serve`` and ``agentledger token new``: the store service (DESIGN section 9).

The work lives in :mod:`agentledger.service` (``run_serve``, ``run_token_new``);
these commands only parse arguments, and import the service extra on use.
"""

from __future__ import annotations

from typing import Literal

import click

from agentledger.cli.temporal import temporal_options

__all__ = ["serve", "token"]

# agentledger.storage.validation's defaults, repeated so that --help imports no store
# (tests/service/test_limits.py pins them equal).
_MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
_MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024


@click.command(short_help="serve a store over HTTP to workers and hosts")
@click.option(
    "--db", metavar="PATH_OR_DSN",
    help="a SQLite file or a postgresql:// DSN (default: $AGENTLEDGER_DB; created or "
    "migrated as needed)",
)  # fmt: skip
@click.option(
    "--listen", default="127.0.0.1:8470", show_default=True, metavar="HOST:PORT",
    help="where to listen (put TLS termination in front; see docs/service.md)",
)  # fmt: skip
@click.option(
    "--tokens", required=True, metavar="FILE", help="the token file (hashes, roles, labels)"
)
@click.option(
    "--keyring", metavar="FILE", default=None,
    help="encryption at rest: keyring file (or $AGENTLEDGER_KEYRING_FILE, $AGENTLEDGER_KEYRING)",
)  # fmt: skip
@click.option(
    "--vault", metavar="FILE", default=None,
    help="encryption at rest: the data-key vault file (or $AGENTLEDGER_VAULT)",
)  # fmt: skip
@click.option(
    "--max-payload-bytes", type=int, default=_MAX_PAYLOAD_BYTES, show_default=True,
    metavar="N",
    help="refuse a write whose record payload is larger (ValidationError)",
)  # fmt: skip
@click.option(
    "--max-checkpoint-bytes", type=int, default=_MAX_CHECKPOINT_BYTES,
    show_default=True, metavar="N",
    help="refuse a suspension whose checkpoint is larger (ValidationError)",
)  # fmt: skip
@click.option(
    "--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True,
    help="a SQLite file's commits: full waits for the disk; normal may lose the last "
    "commits on power loss, never on a crash of the process",
)  # fmt: skip
@click.option(
    "--secure-cookies", type=click.Choice(["auto", "always", "never"]), default="auto",
    show_default=True,
    help="mark the inspector's login cookie Secure: auto over HTTPS as seen by the service; "
    "always behind a TLS proxy on another host",
)  # fmt: skip
@click.option(
    "--host-runtime", metavar="MODULE:FACTORY", default=None,
    help="let host tokens answer, fork and cancel runs from the inspector: FACTORY(store) "
    "builds the runtime that runs them (see docs/inspector.md)",
)  # fmt: skip
@click.option(
    "--max-connections", type=int, default=None, metavar="N",
    help="open connections (each follow stream is one) past which a new one is refused "
    "with a retryable 503 [default: 16384]",
)  # fmt: skip
@click.option(
    "--max-calls", type=int, default=None, metavar="N",
    help="calls served at once; more are refused with a retryable 503 and Retry-After "
    "[default: 512]",
)  # fmt: skip
@click.option(
    "--max-calls-per-token", type=int, default=None, metavar="N",
    help="calls served at once for one token [default: half of --max-calls]",
)  # fmt: skip
@click.option(
    "--max-streams", type=int, default=None, metavar="N",
    help="follow streams open at once (in total and for one token) [default: 12000]",
)  # fmt: skip
@click.option(
    "--max-backlog-bytes", type=int, default=None, metavar="N",
    help="bytes of records waiting, in all, for follow streams read slower than their logs "
    "grow; past it the stream with the most waiting drops it and reads on at its own pace "
    "[default: 268435456]",
)  # fmt: skip
@click.option(
    "--client-timeout", type=float, default=None, metavar="SECONDS",
    help="close a connection whose client takes longer to send a request's headers, to "
    "send its body, or to read any of its answer [default: 10 for headers, 60 for a "
    "body, 30 for an answer]",
)  # fmt: skip
@temporal_options(
    required=False,
    help="the Temporal server running the runs: the inspector shows a running run paused "
    "there (its workflow task keeps failing) with the error (a host runtime on Temporal "
    "does this without it)",
)
def serve(
    db: str | None,
    listen: str,
    tokens: str,
    keyring: str | None,
    vault: str | None,
    max_payload_bytes: int,
    max_checkpoint_bytes: int,
    durability: Literal["full", "normal"],
    secure_cookies: str,
    host_runtime: str | None,
    max_connections: int | None,
    max_calls: int | None,
    max_calls_per_token: int | None,
    max_streams: int | None,
    max_backlog_bytes: int | None,
    client_timeout: float | None,
    temporal: str | None,
    namespace: str,
) -> int:
    """Own a SQLite file or a PostgreSQL database and serve it to StoreClients and the
    web inspector (/ui) until SIGINT or SIGTERM: calls in flight finish, new ones are
    refused. A second serve on the same SQLite file is refused. With a keyring and a
    vault, payloads and checkpoints are sealed at rest (docs/retention.md).

    Past its limits (connections, calls, streams, request body bytes, clients too slow
    to send or read) the service refuses what it cannot take with a 503 and Retry-After,
    which StoreClient waits out and retries; /readyz then says overloaded
    (docs/service.md, "Under overload").

    Exit status: 0 once stopped; 1 when it cannot start (one line on stderr: an
    address in use or not this machine's, a SQLite file already served...); 130
    for a Ctrl-C before it listens."""
    import os

    from agentledger.cli.app import Given
    from agentledger.target import DB_VARIABLE

    root = click.get_current_context().find_root().obj
    db = db or (root.target if isinstance(root, Given) else None) or os.environ.get(DB_VARIABLE)
    if not db:
        raise click.UsageError(
            f"Missing option '--db': the SQLite file or PostgreSQL DSN to serve "
            f"(or set ${DB_VARIABLE})"
        )
    from agentledger.service.server import run_serve

    code = run_serve(
        db,
        listen,
        tokens,
        keyring,
        vault,
        max_payload_bytes=max_payload_bytes,
        max_checkpoint_bytes=max_checkpoint_bytes,
        durability=durability,
        secure_cookies=secure_cookies,
        host_runtime=host_runtime,
        temporal=temporal,
        namespace=namespace,
        overload={
            "max_connections": max_connections,
            "max_calls": max_calls,
            "max_calls_per_token": max_calls_per_token,
            "max_streams": max_streams,
            "max_backlog_bytes": max_backlog_bytes,
            "header_timeout": client_timeout,
            "body_timeout": client_timeout,
            "send_timeout": client_timeout,
        },
    )
    if temporal:  # a Temporal client's native threads can abort the interpreter's teardown
        from agentledger.engine.temporal.cli import exit_now

        exit_now(code)
    return code


@click.group(short_help="manage the store service's bearer tokens")
def token() -> None:
    """Manage the store service's bearer tokens (the file holds only their sha256)."""


@token.command(short_help="print a new token once and add its hash to the token file")
@click.option("--role", required=True, type=click.Choice(["worker", "host", "reader"]))
@click.option(
    "--label", "labels", multiple=True, metavar="K=V",
    help="scope the token to sessions with this label (repeatable)",
)  # fmt: skip
@click.option("--tokens", required=True, metavar="FILE", help="the token file")
def new(role: str, labels: tuple[str, ...], tokens: str) -> int:
    """Print a new random bearer token once and add its sha256 (role, labels) to FILE."""
    from agentledger.service.commands import run_token_new

    return run_token_new(role, list(labels), tokens)
