"""``agentledger transcript RUN_ID``: the transcript rebuilt from a run's records [R2]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.replay import MessageOrigin
    from agentledger.storage.types import TranscriptSegment
    from agentledger.transcript import Message, Part

__all__ = ["message_lines", "transcript"]


@click.command(short_help="a run's transcript, rebuilt from its records")
@click.argument("run_id", shell_complete=run_ids)
@click.option(
    "--model-input",
    is_flag=True,
    help="Only what the model is sent now: from where the history policy's last cut "
    "starts, with the summary that replaced what came before.",
)
@settings_options
def transcript(settings: Settings, run_id: str, model_input: bool) -> None:
    """RUN_ID's transcript rebuilt from its records, as a conversation.

    Each message says where it is stored: the run's own log, or an earlier run
    its history follows by reference (an earlier turn, the suspended run it
    continues, or the run it was forked from, with the record it was cut at).
    Where an agent's history policy cut what the model was sent, a line says
    so; a compaction shows its summary, what it replaced and who wrote it.

    --json prints the transcript's own canonical JSON: an array of
    messages that agentledger.transcript.decode_messages reads back exactly.
    """
    run(with_store(settings, lambda store: _transcript(store, settings, run_id, model_input)))


async def _transcript(
    store: AdminStore, settings: Settings, run_id: str, model_input: bool
) -> None:
    from agentledger.cli.output import echo
    from agentledger.storage.replay import build_messages_from_run_log, replay_with_origins
    from agentledger.transcript import encode_messages

    await store.load_run(run_id)
    if settings.json:
        messages = await build_messages_from_run_log(store, run_id, full=not model_input)
        echo(encode_messages(messages).decode())
        return
    from agentledger.cli.tool_notes import call_notes

    segments = await store.load_transcript_chain(run_id, windowed=model_input)
    pairs = replay_with_origins(segments, full=not model_input)
    for line in _chain_lines(segments, [origin for _, origin in pairs]):
        echo(line)
    notes: dict[str, list[str]] = {}
    for segment in reversed(segments):  # the oldest run first
        for call_id, said in (await call_notes(store, segment.run_id)).items():
            notes.setdefault(call_id, []).extend(said)
    marks = {} if model_input else _window_marks(segments)
    for line in message_lines(pairs, marks=marks, notes=notes):
        echo(line)


def _window_marks(segments: Sequence[TranscriptSegment]) -> dict[tuple[str, str, int], list[str]]:
    """Lines to show before the message each window starts at: the policy's cut, or the
    summary that replaced what came before, with its provenance."""
    from agentledger.views.transcript import chain_records, window_marks

    marks: dict[tuple[str, str, int], list[str]] = {}
    for stored, windows in window_marks(chain_records(segments)).items():
        for window in windows:
            where = f"{window.run} record {window.record}"
            if window.summary:
                replaced = ", ".join(
                    f"{r.run_id} records {r.first}-{r.last}" for r in window.replaces
                )
                lines = [
                    f"-- compacted ({window.policy}, {where}): from here the model was sent "
                    f"this summary instead of {replaced or 'what came before'}, written by "
                    f"{window.model} with prompt {window.prompt_id} "
                    f"version {window.prompt_version}:",
                    *(f"   | {line}" for line in window.summary.splitlines()),
                ]
            else:
                lines = [f"-- cut ({window.policy}, {where}): from here on the model was sent"]
            marks.setdefault(stored, []).extend(lines)
    return marks


def _cut_at(origins: Sequence[MessageOrigin], run_id: str, through: str) -> int | None:
    """The number (``#N``, as listed) of ``run_id``'s last message through its record
    ``through`` (None if none is listed)."""
    last = int(through) if through.isdigit() else -1
    found = None
    for n, origin in enumerate(origins):
        mine = origin.run_id == run_id and origin.record_id.isdigit()
        if mine and int(origin.record_id) <= last:
            found = n
    return found


def _chain_lines(
    segments: Sequence[TranscriptSegment], origins: Sequence[MessageOrigin] = ()
) -> list[str]:
    """How the run's history reaches back: one line per history reference followed; a
    fork is a branch of its source at the message (``#N`` below) it leaves it after."""
    from agentledger.views.transcript import history_links

    lines = []
    for link in history_links(segments):
        if link.kind != "fork":
            how = "follows" if link.kind == "next_turn" else "continues"
            lines.append(f"{link.run} {how} {link.source}")
            continue
        at = _cut_at(origins, link.source, link.through)
        where = f"message #{at} (" if at is not None else "("
        cut = f"cut after its record {link.through})"
        lines.append(f"{link.run} is a branch of {link.source} at {where}{cut}")
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


def message_lines(
    messages: Sequence[Message | tuple[Message, MessageOrigin]],
    *,
    marks: dict[tuple[str, str, int], list[str]] | None = None,
    notes: dict[str, list[str]] | None = None,
) -> list[str]:
    """Each message as a ``#N role`` line (with where it is stored, when known) and its
    parts, indented, in order, whole; ``marks`` go before the message stored where
    they are keyed (run, record, place in the record); ``notes`` (by tool call id: its
    effect class, in doubt, the answers) follow the call's tool use."""
    from agentledger.transcript import ToolUsePart

    lines: list[str] = []
    for index, item in enumerate(messages):
        origin = None
        if isinstance(item, tuple):
            item, origin = item
        message = item
        where = ""
        if origin is not None and marks:
            lines.extend(marks.get((origin.run_id, origin.record_id, origin.position), ()))
        if origin is not None:
            where = f"  ({origin.run_id} record {origin.record_id}"
            where += ", by reference)" if origin.depth else ")"
        lines.append(f"#{index} {message.role}{where}")
        for part in message.parts:
            text = _part(part).splitlines() or [""]
            lines.extend(f"    {line}" for line in text)
            if notes and isinstance(part, ToolUsePart) and part.id in notes:
                lines.append(f"      [{'; '.join(notes[part.id])}]")
    return lines
