"""``agentledger transcript RUN_ID``: the transcript rebuilt from a run's records [R2]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.types import TranscriptSegment
    from agentledger.transcript import Message, Part
    from agentledger.transcript.replay import MessageOrigin

__all__ = ["message_lines", "transcript"]


@click.command(short_help="a run's transcript, rebuilt from its records")
@click.argument("run_id", shell_complete=run_ids)
@settings_options
def transcript(settings: Settings, run_id: str) -> None:
    """RUN_ID's transcript rebuilt from its records, as a conversation.

    Each message says where it is stored: the run's own log, or an earlier run
    its history follows by reference (an earlier turn, the suspended run it
    continues, or the run it was forked from, with the record it was cut at).

    --json prints the transcript's own canonical JSON: an array of
    messages that agentledger.transcript.decode_messages reads back exactly.
    """
    run(with_store(settings, lambda store: _transcript(store, settings, run_id)))


async def _transcript(store: AdminStore, settings: Settings, run_id: str) -> None:
    from agentledger.cli.output import echo
    from agentledger.transcript import encode_messages
    from agentledger.transcript.replay import build_messages_from_run_log, replay_with_origins

    await store.load_run(run_id)
    if settings.json:
        messages = await build_messages_from_run_log(store, run_id)
        echo(encode_messages(messages).decode())
        return
    segments = await store.load_transcript_chain(run_id)
    for line in _chain_lines(segments):
        echo(line)
    for line in message_lines(replay_with_origins(segments)):
        echo(line)


def _chain_lines(segments: Sequence[TranscriptSegment]) -> list[str]:
    """How the run's history reaches back: one line per history reference followed."""
    from agentledger.storage import payloads
    from agentledger.storage.transcript_chain import decode_reference

    lines = []
    for segment in segments:
        for record in segment.records:
            if record.type == payloads.TRANSCRIPT_REFERENCED:
                ref = decode_reference(record)
                how = {"next_turn": "follows", "continuation": "continues", "fork": "forks"}
                cut = "" if ref.kind != "fork" else f" at record {ref.through}"
                lines.append(f"{segment.run_id} {how[ref.kind]} {ref.run_id}{cut}")
    return lines


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


def message_lines(messages: Sequence[Message | tuple[Message, MessageOrigin]]) -> list[str]:
    """Each message as a ``#N role`` line (with where it is stored, when known) and its
    parts, indented, in order, whole."""
    lines: list[str] = []
    for index, item in enumerate(messages):
        origin = None
        if isinstance(item, tuple):
            item, origin = item
        message = item
        where = ""
        if origin is not None:
            where = f"  ({origin.run_id} record {origin.record_id}"
            where += ", by reference)" if origin.depth else ")"
        lines.append(f"#{index} {message.role}{where}")
        for part in message.parts:
            text = _part(part).splitlines() or [""]
            lines.extend(f"    {line}" for line in text)
    return lines
