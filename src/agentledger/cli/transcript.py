"""``agentledger transcript RUN_ID``: the transcript rebuilt from a run's records [R2]."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.cli.target import AdminStore
    from agentledger.transcript import Message, Part

__all__ = ["message_lines", "transcript"]


@click.command(short_help="a run's transcript, rebuilt from its records")
@click.argument("run_id", shell_complete=run_ids)
@settings_options
def transcript(settings: Settings, run_id: str) -> None:
    """RUN_ID's transcript rebuilt from its records, as a conversation.

    --json prints the transcript's own canonical JSON: an array of
    messages that agentledger.transcript.decode_messages reads back exactly.
    """
    run(with_store(settings, lambda store: _transcript(store, settings, run_id)))


async def _transcript(store: AdminStore, settings: Settings, run_id: str) -> None:
    from agentledger.cli.output import echo
    from agentledger.transcript import encode_messages
    from agentledger.transcript.replay import build_messages_from_run_log

    await store.load_run(run_id)
    messages = await build_messages_from_run_log(store, run_id)
    if settings.json:
        echo(encode_messages(messages).decode())
        return
    for line in message_lines(messages):
        echo(line)


def _part(part: Part) -> str:
    from agentledger.cli.output import dump
    from agentledger.transcript import (
        CacheCheckpointPart,
        CitationsPart,
        DocumentPart,
        ImagePart,
        TextPart,
        ThinkingPart,
        ToolResultPart,
        ToolUsePart,
    )

    match part:
        case TextPart():
            return part.text
        case ThinkingPart():
            if part.redacted:
                return f"(thinking, redacted: {len(part.redacted)} bytes)"
            return f"(thinking) {part.text}"
        case ToolUsePart():
            return f"→ {part.name}({dump(part.input)}) [{part.id}]"
        case ToolResultPart():
            flag = " ERROR" if part.is_error else ""
            return f"← [{part.tool_use_id}]{flag} {dump(part.content)}"
        case CitationsPart():
            return f"{part.text} [{len(part.citations)} citation(s)]"
        case ImagePart():
            source = part.url if part.url is not None else f"{len(part.data or b'')} bytes"
            return f"(image {part.format}: {source})"
        case DocumentPart():
            return f"(document {part.name!r} {part.format})".replace(" )", ")")
        case CacheCheckpointPart():
            return "(cache checkpoint)"
    return f"({type(part).__name__})"


def message_lines(messages: list[Message]) -> list[str]:
    """Each message as a ``#N role`` line and its parts, indented, in order, whole."""
    lines: list[str] = []
    for index, message in enumerate(messages):
        lines.append(f"#{index} {message.role}")
        for part in message.parts:
            text = _part(part).splitlines() or [""]
            lines.extend(f"    {line}" for line in text)
    return lines
