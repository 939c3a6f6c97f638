"""``agentledger usage [SESSION_ID] [--by KEY]``: what sessions hold, from the counters the
store keeps as records are written (bytes, records, runs, tokens), never a scan."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, label_option, run, settings_options, with_store
from agentledger.cli.complete import session_ids

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agentledger.storage.accounting import UsageTotals
    from agentledger.storage.protocol import AdminStore

__all__ = ["usage"]

_HEADER = ["BYTES", "RECORDS", "RUNS", "INPUT", "OUTPUT", "CACHED"]


@click.command(short_help="bytes, records, runs and tokens held, per session or per label")
@click.argument("session_id", required=False, shell_complete=session_ids)
@click.option(
    "--by",
    "key",
    metavar="KEY",
    default="",
    help="one total per value of this label (a tenant's, say); sessions without it are left out",
)
@label_option
@settings_options
def usage(settings: Settings, session_id: str | None, key: str, labels: dict[str, str]) -> None:
    """What the store holds, read from counters kept as the records were written.

    With SESSION_ID: the session's payload bytes (as stored), records, runs and
    model tokens (input, output, and input read from the provider's cache),
    then each of its runs. Without: the total of every session (those carrying
    each --label), or with --by KEY one total per value of label KEY. Tokens are
    those the runtime's model_usage records report.
    """
    if session_id is not None and (key or labels):
        raise click.UsageError("give SESSION_ID, or --by/--label for totals over sessions")
    if session_id is not None:
        sid = session_id
        run(with_store(settings, lambda store: _session(store, settings, sid)))
    else:
        run(with_store(settings, lambda store: _totals(store, settings, key, labels)))


def _cells(u: UsageTotals) -> list[str]:
    return [str(v) for v in (u.bytes, u.records, u.runs, u.input_tokens, u.output_tokens,
                             u.cached_tokens)]  # fmt: skip


async def _session(store: AdminStore, settings: Settings, session_id: str) -> None:
    from agentledger.cli.output import columns, echo, echo_json, jsonable

    total = await store.load_session_usage(session_id)
    runs = [meta.run_id for meta in await store.list_runs_by_session(session_id)]
    per_run = [await store.load_run_usage(run_id) for run_id in runs]
    if settings.json:
        listed = [{"run_id": r, **jsonable(u)} for r, u in zip(runs, per_run, strict=True)]
        echo_json({"session_id": session_id, **jsonable(total), "by_run": listed})
        return
    rows = [["session", *_cells(total)]]
    rows += [[run_id, *_cells(u)] for run_id, u in zip(runs, per_run, strict=True)]
    for line in columns(["", *_HEADER], rows):
        echo(line)


async def _totals(
    store: AdminStore, settings: Settings, key: str, labels: Mapping[str, str]
) -> None:
    from agentledger.cli.output import columns, echo, echo_json, jsonable

    groups = await store.usage_by_label(key, labels=dict(labels))
    if settings.json:
        echo_json({"by": key, "groups": jsonable(groups)})
        return
    rows = [[g.value if key else "all", str(g.sessions), *_cells(g.usage)] for g in groups]
    if not rows:
        echo(f"no session carries label {key!r}" if key else "no sessions")
        return
    for line in columns([key.upper() if key else "", "SESSIONS", *_HEADER], rows):
        echo(line)
