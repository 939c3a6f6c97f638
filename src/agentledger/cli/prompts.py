"""``agentledger prompts RUN_ID``: every prompt version that influenced a run [D5] [V6]."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.runtime.prompts import PromptVersion
    from agentledger.storage.protocol import AdminStore

__all__ = ["prompt_rows", "prompts"]


@click.command(short_help="every prompt version that influenced a run")
@click.argument("run_id", shell_complete=run_ids)
@settings_options
def prompts(settings: Settings, run_id: str) -> None:
    """Every prompt id and version that influenced RUN_ID, read from records only.

    One row per record that used one: the run's own rendered prompt (own), its
    child runs' (child), the earlier turns its history was taken from, back
    to the first (history; a fork's source only up to the record it was cut
    at), and the prompt of each summariser that wrote a compaction summary
    (summary, with the summariser's model). A damaged record anywhere on the
    way is an error naming its run and record, never skipped.

    --json prints {"run_id", "prompts"}: each prompt id and version once, in
    the order first used, with "uses" (run_id, record_id, via, model).
    """
    run(with_store(settings, lambda store: _prompts(store, settings, run_id)))


async def _prompts(store: AdminStore, settings: Settings, run_id: str) -> None:
    from agentledger.cli.output import columns, echo, echo_json
    from agentledger.runtime.prompts import prompt_versions

    found = await prompt_versions(store, run_id)
    if settings.json:
        echo_json({"run_id": run_id, "prompts": found})
        return
    if not found:
        echo(f"run {run_id} rendered no prompt, nor did any run it reaches")
        return
    for line in columns(("PROMPT", "VERSION", "VIA", "RUN", "RECORD", "MODEL"), prompt_rows(found)):
        echo(line)


def prompt_rows(found: tuple[PromptVersion, ...]) -> list[tuple[str, str, str, str, str, str]]:
    """One row per use: prompt id, version, how it was reached, run, record, model."""
    return [
        (version.prompt_id, version.version, use.via, use.run_id, use.record_id, use.model)
        for version in found
        for use in version.uses
    ]
