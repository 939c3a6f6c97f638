"""``agentledger demo``: run the demo session into a SQLite database."""

from __future__ import annotations

import click

from agentledger.cli.app import SQLITE_HELP, Settings, run, settings_options

__all__ = ["demo"]


DEMO_PRICES = """# prices per million tokens of the demo's models (made up: the demo model is free)
currency = "USD"
[models.demo-concierge]
input = 3.0
output = 15.0
[models.demo-research]
input = 0.8
output = 4.0
"""


@click.command(short_help="record a demo session (an offline model unless an API key is set)")
@click.option(
    "--serve", is_flag=True,
    help="then serve the database with a host runtime of the demo's agents and a price "
    "table, and print a host token: approve, fork, chat and costs work in the inspector",
)  # fmt: skip
@click.option(
    "--listen", default="127.0.0.1:8470", show_default=True, metavar="HOST:PORT",
    help="where --serve listens (port 0: any free port)",
)  # fmt: skip
@settings_options(target_help=SQLITE_HELP)
def demo(settings: Settings, serve: bool, listen: str) -> int:
    """Run a four-turn travel-concierge session into the SQLite file --db (created if
    missing): parallel tool calls, a child run, a suspension resumed, a cancellation.
    The model is an offline, deterministic demo model, unless ANTHROPIC_API_KEY,
    OPENAI_API_KEY or AWS credentials are set: then that provider's real model.

    With --json the narration goes to stderr and stdout gets
    {"db", "session", "runs"} describing what was recorded.

    With --serve it then serves the file as `agentledger serve` does, with the
    demo's agents as its host runtime (the same model) and a price table
    (FILE.prices.toml, made-up prices), and prints a new host token (its hash
    added to FILE.tokens.json): log in with it to approve, fork, send messages,
    start sessions and see costs. Stop it with Ctrl-C.
    """
    from agentledger.errors import ValidationError

    if settings.target.kind != "sqlite":
        raise ValidationError(
            field="--db",
            expected="a SQLite file",
            got=str(settings.target),
            message=f"the demo writes a SQLite file, not {settings.target}",
        )
    path = settings.target.path
    if not settings.json:
        from agentledger.demo import run_demo

        code = run_demo(path)
    else:
        code = run(_demo_json(path))
    if code or not serve:
        return code
    return _serve(path, listen)


def _serve(path: str, listen: str) -> int:
    """Serve the demo database with the demo's host runtime, a price table and a new host
    token (printed on stderr, so --json's stdout stays JSON)."""
    import os
    import sys
    from pathlib import Path

    from agentledger.service.auth import add_token
    from agentledger.service.inspector.usage import PRICES_ENV
    from agentledger.service.server import run_serve

    db = Path(path)
    prices = db.with_name(db.name + ".prices.toml")
    if not prices.exists():
        prices.write_text(DEMO_PRICES, encoding="utf-8")
    os.environ.setdefault(PRICES_ENV, str(prices))
    tokens = db.with_name(db.name + ".tokens.json")
    token = add_token(tokens, "host")
    print(
        f"\nA host token for the inspector (shown once; its hash is in {tokens}):\n  {token}\n"
        f"Prices: {os.environ[PRICES_ENV]}. Log in at the address below, then open a session: "
        "send a message, approve a booking, fork from a message.",
        file=sys.stderr,
        flush=True,
    )
    return run_serve(str(db), listen, str(tokens), host_runtime="agentledger.demo:host_runtime")


async def _demo_json(path: str) -> int:
    """The demo with its narration on stderr, then what it recorded as JSON on stdout."""
    import asyncio
    import contextlib
    import os
    import sys

    from agentledger.cli.output import echo_json, jsonable
    from agentledger.cli.runs import predecessor
    from agentledger.cli.sessions import list_all_sessions
    from agentledger.cli.target import opened
    from agentledger.demo import run_demo
    from agentledger.target import Target

    target = Target(path, "sqlite")
    before: set[str] = set()
    if await asyncio.to_thread(os.path.exists, path):
        async with opened(target, read_only=True) as store:
            before = {s.id for s in (await list_all_sessions(store))[0]}
    with contextlib.redirect_stdout(sys.stderr):
        code = await asyncio.to_thread(run_demo, path)
    async with opened(target, read_only=True) as store:
        (session,) = [s for s in (await list_all_sessions(store))[0] if s.id not in before]
        metas = await store.list_runs_by_session(session.id)
        rows = [
            {**jsonable(r), "predecessor_run_id": await predecessor(store, r.run_id)} for r in metas
        ]
    echo_json({"db": path, "session": session, "runs": rows})
    return code
