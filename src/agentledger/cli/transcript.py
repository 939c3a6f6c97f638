"""``agentledger transcript RUN_ID``: the transcript rebuilt from a run's records [R2]."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
import msgspec

from agentledger.cli.app import Settings, run, settings_options, with_store
from agentledger.cli.complete import run_ids

PROVIDERS = ("anthropic", "openai-chat", "openai-responses", "bedrock")
"""The adapters ``--provider-request`` names (agentledger.views.model_view.PROVIDERS; kept
here so that the CLI starts without importing the runtime)."""

if TYPE_CHECKING:
    from agentledger.storage.protocol import AdminStore
    from agentledger.storage.replay import MessageOrigin
    from agentledger.storage.types import TranscriptSegment
    from agentledger.transcript import Message, Part
    from agentledger.views.model_view import ModelTurnView

__all__ = ["message_lines", "transcript", "turn_json", "turn_lines"]


@click.command(short_help="a run's transcript, rebuilt from its records")
@click.argument("run_id", shell_complete=run_ids)
@click.option(
    "--model-input",
    is_flag=True,
    help="Only what the model is sent now: from where the history policy's last cut "
    "starts, with the summary that replaced what came before.",
)
@click.option(
    "--turn",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --model-input: planner turn N as the model saw it: the request (system "
    "prompt and messages after the history policy), the answer with its usage, and what "
    "changed since the previous request (added, or cut by a history policy).",
)
@click.option(
    "--provider-request",
    type=click.Choice(PROVIDERS),
    default=None,
    help="With --turn: print the request body that provider's adapter encodes for the turn, "
    "as JSON. The run log holds no tool definitions and no parameters (max_tokens, "
    "temperature, provider options): it is encoded without tools, with the adapter's "
    "defaults, and says so on stderr.",
)
@settings_options
def transcript(
    settings: Settings,
    run_id: str,
    model_input: bool,
    turn: int | None,
    provider_request: str | None,
) -> None:
    """RUN_ID's transcript rebuilt from its records, as a conversation.

    Each message says where it is stored: the run's own log, or an earlier run
    its history follows by reference (an earlier turn, the suspended run it
    continues, or the run it was forked from, with the record it was cut at).
    Where an agent's history policy cut what the model was sent, a line says
    so; a compaction shows its summary, what it replaced and who wrote it.

    --json prints the transcript's own canonical JSON: an array of
    messages that agentledger.transcript.decode_messages reads back exactly.

    --model-input --turn N shows one planner turn as the model saw it, rebuilt
    from the run log (with --json: one object holding the request, the
    response and the diff).
    """
    if turn is None and provider_request is not None:
        raise click.UsageError("--provider-request goes with --model-input --turn N")
    if turn is not None and not model_input:
        raise click.UsageError("--turn goes with --model-input")
    if turn is not None:
        run(
            with_store(
                settings, lambda store: _model_turn(store, settings, run_id, turn, provider_request)
            )
        )
        return
    run(with_store(settings, lambda store: _transcript(store, settings, run_id, model_input)))


async def _model_turn(
    store: AdminStore, settings: Settings, run_id: str, turn: int, provider: str | None
) -> None:
    from agentledger.cli.output import dump, echo
    from agentledger.views.model_view import model_turn

    view = await model_turn(store, run_id, turn)
    if provider is not None:
        body = view.provider_request(provider)
        click.echo(
            "not in the run log, so not in this request: "
            + "; ".join(view.request.not_recorded)
            + " (the adapter's defaults stand)",
            err=True,
        )
        echo(dump(body))
        return
    if settings.json:
        echo(dump(turn_json(view)))
        return
    for line in turn_lines(view):
        echo(line)


def turn_json(view: ModelTurnView) -> dict[str, Any]:
    """A turn's model view as the CLI's JSON: messages in the transcript's canonical JSON."""
    from agentledger.transcript import encode_messages

    def messages(items: Sequence[Message]) -> Any:
        return msgspec.json.decode(encode_messages(list(items)))

    def origins(pairs: Sequence[tuple[Message, MessageOrigin]]) -> list[dict[str, Any]]:
        return [
            {"run_id": o.run_id, "record": o.record_id, "position": o.position} for _, o in pairs
        ]

    request, response, diff = view.request, view.response, view.diff
    return {
        "run_id": view.run_id,
        "turn": view.turn,
        "phase": view.phase,
        "request": {
            "system": request.system,
            "prompt_id": request.prompt_id,
            "prompt_version": request.prompt_version,
            "model": request.model,
            "messages": messages(request.messages),
            "window": {
                "record": request.window_record,
                "policy": request.window_policy,
                "summary": request.window_summary,
            }
            if request.window_record
            else None,
            "not_recorded": list(request.not_recorded),
        },
        "response": {
            "message": messages([response.message])[0] if response.message else None,
            "usage": [msgspec.structs.asdict(u) for u in response.usage],
            "stop_reason": response.stop_reason,
            "stop_reason_note": response.stop_reason_note,
        },
        "diff": {
            "previous": diff.previous,
            "added": origins(diff.added),
            "cut": origins(diff.cut),
            "changed": origins(diff.changed),
            "policy": diff.policy,
            "summary": diff.summary,
        },
    }


def turn_lines(view: ModelTurnView) -> list[str]:
    """A turn's model view as lines: the request, the response, the diff."""
    request, response, diff = view.request, view.response, view.diff
    lines = [f"turn {view.turn} of run {view.run_id} ({view.phase})"]
    lines.append("== request" + (f" to {request.model}" if request.model else ""))
    if request.system:
        lines.append(f"system prompt {request.prompt_id} version {request.prompt_version}:")
        lines.extend(f"   | {line}" for line in request.system.splitlines())
    else:
        lines.append("no system prompt recorded")
    if request.window_record:
        what = "a summary, then" if request.window_summary else ""
        lines.append(
            f"history policy {request.window_policy} ({request.window_record}): "
            f"the model was sent {what} only the messages below".replace("  ", " ")
        )
    if request.policy_failed:
        lines.append(f"history policy failed: {request.policy_failed}")
    lines.extend(message_lines(list(zip(request.messages, request.origins, strict=True))))
    lines.append("not in the run log: " + "; ".join(request.not_recorded))
    lines.append("== response")
    if response.message is not None:
        lines.extend(message_lines([response.message]))
    else:
        lines.append("no answer recorded")
    for used in response.usage:
        lines.append(
            f"usage: {used.model} {used.input_tokens} in, {used.output_tokens} out, "
            f"{used.cache_read_tokens} cache read, {used.cache_write_tokens} cache write"
        )
    if response.summariser is not None:
        s = response.summariser
        lines.append(f"summariser usage: {s.model} {s.input_tokens} in, {s.output_tokens} out")
    if response.message is not None:
        lines.append(f"stop reason: {response.stop_reason} ({response.stop_reason_note})")
    lines.append(
        f"== changes since {diff.previous}'s request"
        if diff.previous
        else "== changes: first request"
    )
    if diff.system_changed:
        lines.append("~ the system prompt changed")
    for sign, pairs, words in (
        ("+", diff.added, "added"),
        ("~", diff.changed, "changed (a summary put first)"),
        ("-", diff.cut, f"cut by {diff.policy}" if diff.policy else "no longer sent"),
    ):
        if pairs:
            lines.append(f"{sign} {len(pairs)} message(s) {words}:")
            lines.extend(f"{sign} {line}" for line in message_lines(list(pairs)))
    if not (diff.added or diff.changed or diff.cut):
        lines.append("nothing changed")
    return lines


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
