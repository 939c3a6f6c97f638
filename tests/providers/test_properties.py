"""Property tests: encoding keeps every part in order; tool ids and names round-trip ([T3] [T7])."""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agentledger.providers import ToolDefinition
from agentledger.providers._json import dumps
from agentledger.providers._names import ToolNames, wire_name
from agentledger.testing.providers import anthropic as anthropic_wire
from agentledger.testing.providers import bedrock as bedrock_wire
from agentledger.testing.providers import openai as openai_wire
from agentledger.transcript import (
    CacheCheckpointPart,
    CitationsPart,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)
from tests.providers.cases import PDF, TARGETS, encoder
from tests.transcript.strategies import planner_transcripts

TOOLS = (ToolDefinition(name="lookup"),)


def _labelled(messages: list[Message], target: str) -> tuple[list[Message], list[str]]:
    """Give every part a unique label the payload must show, in transcript order.

    Parts are swapped for carriable equivalents of the same kind where the
    target needs it (documents as PDF bytes, images by URL, citations without
    sources, signed reasoning with the target's provenance).
    """
    counter = itertools.count()
    labels: list[str] = []
    out: list[Message] = []
    for message in messages:
        parts: list[Part] = []
        reasoning: list[Any] = []
        for part in message.parts:
            n = next(counter)
            new: Part = part
            if isinstance(part, TextPart | CitationsPart):
                text = f"text{n}"
                carried = target != "openai_chat" and isinstance(part, CitationsPart)
                new = CitationsPart(text=text, citations=()) if carried else TextPart(text=text)
                labels.append(text)
            elif isinstance(part, ThinkingPart):
                new = ThinkingPart(text=f"think{n}", signature=f"sig{n}")
                if target == "openai_responses":
                    item = {
                        "type": "reasoning",
                        "id": f"rs{n}",
                        "summary": [],
                        "encrypted_content": f"sig{n}",
                    }
                    reasoning.append({"part_index": len(parts), "item": item})
                    labels.append(f"sig{n}")
                elif target != "openai_chat":
                    reasoning.append(len(parts))
                    labels.append(f"think{n}")
            elif isinstance(part, ImagePart):
                scheme = "s3://bucket" if target == "bedrock" else "https://example.com"
                new = ImagePart(format="png", url=f"{scheme}/image{n}.png")
                labels.append(f"{scheme}/image{n}.png")
            elif isinstance(part, DocumentPart):
                new = DocumentPart(name=f"doc{n}", format="pdf", data=PDF)
                labels.append(f"doc{n}")
            elif isinstance(part, ToolUsePart):
                labels.append(part.id)
            elif isinstance(part, ToolResultPart):
                labels.append(part.tool_use_id)
            parts.append(new)
        owner = {"bedrock": "bedrock", "anthropic": "anthropic"}.get(target, "openai")
        meta = {owner: {"reasoning": reasoning}} if reasoning else None
        out.append(Message(role=message.role, parts=tuple(parts), meta=meta))
    return out, labels


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, in document order (JSON text inside strings included)."""
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, str):
        found = [value]
        if value[:1] in "{[":
            with contextlib.suppress(ValueError):
                found += _strings(json.loads(value))
        return found
    return []


def _chat_can_carry(messages: list[Message]) -> bool:
    """Chat needs a tool-calling assistant message to be the last of its group."""
    for first, second in itertools.pairwise(messages):
        calls = any(isinstance(p, ToolUsePart) for p in first.parts)
        if first.role == second.role == "assistant" and calls:
            return False
    return True


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcript=planner_transcripts(), target=st.sampled_from(TARGETS))
def test_encoding_keeps_every_part_in_order(transcript: list[Message], target: str) -> None:
    """[T3] [T7] For any valid transcript the target can carry, each part shows up, in order.

    Only cache checkpoints may be left out here (``drop_cache_checkpoints``);
    where they go is pinned by the golden files.
    """
    tail = list(itertools.takewhile(lambda m: m.role == "assistant", reversed(transcript)))
    assume(not any(isinstance(p, ToolUsePart) for m in tail for p in m.parts))  # still waiting
    if target == "openai_chat":
        assume(_chat_can_carry(transcript))
    # A message of nothing but a checkpoint has no content to send anywhere (refused).
    assume(all(any(not isinstance(p, CacheCheckpointPart) for p in m.parts) for m in transcript))
    messages, labels = _labelled(transcript, target)
    # Chat replays no reasoning at all: leave it out there (asked for, not silent).
    options = {"model": "m", "drop_cache_checkpoints": True}
    if target == "openai_chat":
        options["drop_foreign_reasoning"] = True
    payload = json.loads(dumps(encoder(target)(messages, TOOLS, options)))
    body = {key: value for key, value in payload.items() if key not in ("tools", "toolConfig")}
    wanted = set(labels)
    seen = [s for s in _strings(body) if s in wanted]
    assert seen == labels


_ids = st.from_regex(r"[a-zA-Z0-9_.:-]{1,40}", fullmatch=True)
_names = st.text(st.sampled_from(list("ab._-/:Z9 é中")), min_size=1, max_size=80)


@settings(max_examples=60, deadline=None)
@given(
    calls=st.lists(st.tuples(_ids, _names), min_size=1, max_size=4, unique_by=lambda c: c[0]),
    target=st.sampled_from(TARGETS),
)
def test_tool_use_ids_and_names_round_trip(calls: list[tuple[str, str]], target: str) -> None:
    """Ids come back unchanged and wire names map back to the canonical tool names."""
    names = ToolNames()
    try:
        wires = [names.add(name) for _, name in calls]
    except Exception:
        assume(False)
        raise
    assert all(len(w) <= 64 and w == wire_name(n) for w, (_, n) in zip(wires, calls, strict=True))
    inputs = [
        (call_id, wire, {"n": i})
        for i, ((call_id, _), wire) in enumerate(zip(calls, wires, strict=True))
    ]
    from agentledger.providers import anthropic, bedrock, openai_chat, openai_responses

    if target == "anthropic":
        body = anthropic_wire.message(*(anthropic_wire.tool_use_block(*c) for c in inputs))
        response = anthropic.decode(body, names)
    elif target == "bedrock":
        body = bedrock_wire.converse_response(
            *({"toolUse": {"toolUseId": i, "name": w, "input": a}} for i, w, a in inputs)
        )
        response = bedrock.decode(body, names)
    elif target == "openai_chat":
        response = openai_chat.decode(openai_wire.completion(None, inputs), names)
    else:
        items = [
            {"type": "function_call", "call_id": i, "name": w, "arguments": json.dumps(a)}
            for i, w, a in inputs
        ]
        response = openai_responses.decode(openai_wire.response(*items), names)
    uses = [p for p in response.message.parts if isinstance(p, ToolUsePart)]
    assert [(u.id, u.name) for u in uses] == calls
    # Sent back, the same uses go out under the same wire names and ids.
    results = tuple(ToolResultPart(tool_use_id=u.id, content="ok") for u in uses)
    transcript = [
        Message(role="user", parts=(TextPart(text="go"),)),
        response.message,
        Message(role="user", parts=results),
    ]
    tools = tuple(ToolDefinition(name=name) for name in dict.fromkeys(n for _, n in calls))
    sent = _strings(json.loads(dumps(encoder(target)(transcript, tools, {"model": "m"}))))
    for (call_id, _), wire in zip(calls, wires, strict=True):
        assert call_id in sent
        assert wire in sent


def test_cache_checkpoints_are_never_silently_dropped() -> None:
    """Without the option, a checkpoint a target cannot place is an error, not a gap."""
    from agentledger.errors import TranscriptError

    messages = [
        Message(role="user", parts=(TextPart(text="q"),)),
        Message(
            role="assistant",
            parts=(ToolUsePart(id="c1", name="lookup", input={}), CacheCheckpointPart()),
        ),
        Message(role="user", parts=(ToolResultPart(tool_use_id="c1", content="ok"),)),
    ]
    for target in ("openai_chat", "openai_responses"):
        with pytest.raises(TranscriptError) as refused:
            encoder(target)(messages, TOOLS, {"model": "m"})
        assert (refused.value.message_index, refused.value.part_index) == (1, 1)
