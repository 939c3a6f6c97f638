"""pydantic-ai message history <-> transcripts: lossless both ways, loud where it cannot be.

Property tests draw transcripts from ``tests/transcript/strategies.py`` (moved
into the part kinds both sides have); real ``Agent`` runs with pydantic-ai's
``FunctionModel`` and ``TestModel`` provide histories as pydantic-ai writes them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, ModelRetry
from pydantic_ai import messages as pai
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from agentledger.contrib.pydantic_ai import from_pydantic_ai, to_pydantic_ai
from agentledger.contrib.pydantic_ai.common import STAMPED
from agentledger.errors import TranscriptError
from agentledger.transcript import (
    CacheCheckpointPart,
    Citation,
    CitationsPart,
    DocumentPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    decode_messages,
    encode_messages,
    validate_planner_transcript,
)
from tests.transcript import strategies as ts

AT = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
_FORMATS = ("pdf", "csv", "docx", "html", "txt", "md")


def _shared_part(role: str, part: Part, draw: st.DrawFn) -> Part:
    """``part`` moved into what both sides carry (same kind wherever one exists)."""
    if isinstance(part, ThinkingPart) and part.redacted:
        return ThinkingPart(signature=part.signature or "sig", index=part.index, final=part.final)
    if isinstance(part, CitationsPart):
        return TextPart(text=part.text)
    if isinstance(part, DocumentPart):
        if part.data is None and part.uri is None:
            source = draw(st.sampled_from([{"data": b"%"}, {"uri": "s3://bucket/doc"}]))
            return DocumentPart(name=part.name, format=draw(st.sampled_from(_FORMATS)), **source)
        return DocumentPart(
            name=part.name,
            format=part.format or "pdf",
            data=part.data,
            uri=part.uri,
        )
    if role == "assistant" and isinstance(part, ImagePart) and part.data is None:
        return ImagePart(format=part.format, data=b"\x89PNG")
    if role == "user" and isinstance(part, ImagePart) and draw(st.booleans()):
        return ImagePart(format="gif", url="https://example.com/x")
    return part


@st.composite
def shared_transcripts(draw: st.DrawFn) -> list[Message]:
    """Valid planner transcripts of parts both sides carry, with thinking in any index/final
    state, tool inputs and results of any JSON (exact numbers included), and foreign meta."""
    transcript = draw(ts.planner_transcripts())
    out: list[Message] = []
    for message in transcript:
        parts = tuple(_shared_part(message.role, part, draw) for part in message.parts)
        if message.role == "assistant":
            parts = tuple(
                draw(
                    st.builds(
                        ThinkingPart,
                        text=st.just(p.text),
                        signature=st.just(p.signature),
                        index=st.integers(0, 5),
                        final=st.booleans(),
                    )
                )
                if isinstance(p, ThinkingPart)
                else ToolUsePart(
                    id=p.id,
                    name=p.name,
                    input=draw(ts.json_objects),
                    thought_signature=draw(ts.texts),
                )
                if isinstance(p, ToolUsePart)
                else p
                for p in parts
            )
            parts = tuple(p for p in parts if not isinstance(p, CacheCheckpointPart))
            if draw(st.booleans()):  # a generated image, after any thinking, before any call
                at = sum(isinstance(p, ThinkingPart) for p in parts)
                parts = (*parts[:at], ImagePart(format="webp", data=b"RIFF"), *parts[at:])
        if message.role == "user":
            parts = tuple(
                ToolResultPart(
                    tool_use_id=p.tool_use_id, content=draw(ts.json_values), is_error=p.is_error
                )
                if isinstance(p, ToolResultPart)
                else p
                for p in parts
            )
        meta = draw(st.none() | st.dictionaries(st.sampled_from(["openai", "x"]), ts.json_objects))
        out.append(Message(role=message.role, parts=parts, meta=meta or None))
    validate_planner_transcript(out)
    return out


@settings(max_examples=40, deadline=None)
@given(transcript=shared_transcripts())
def test_transcripts_survive_pydantic_ai_unchanged(transcript: list[Message]) -> None:
    """Transcript -> pydantic-ai -> transcript is the identity on the shared subset."""
    history = to_pydantic_ai(transcript, timestamp=AT)
    assert from_pydantic_ai(history, timestamps=False) == transcript
    # and the way pydantic-ai -> transcript -> pydantic-ai is exact too, stamps included
    assert to_pydantic_ai(from_pydantic_ai(history), timestamp=AT) == history


@settings(max_examples=25, deadline=None)
@given(transcript=shared_transcripts())
def test_history_survives_pydantic_ai_serialisation(transcript: list[Message]) -> None:
    """The history is pydantic-ai's own: it dumps and loads with ModelMessagesTypeAdapter."""
    history = to_pydantic_ai(transcript, timestamp=AT)
    loaded = pai.ModelMessagesTypeAdapter.validate_json(
        pai.ModelMessagesTypeAdapter.dump_json(history)
    )
    again = from_pydantic_ai(loaded, timestamps=False)
    assert [m.role for m in again] == [m.role for m in transcript]
    assert [[p.__struct_config__.tag for p in m.parts] for m in again] == [
        [p.__struct_config__.tag for p in m.parts] for m in transcript
    ]


def test_the_mapping_part_for_part() -> None:
    """Each shared kind lands on its pydantic-ai counterpart, ids and signatures kept."""
    transcript = [
        Message(role="system", parts=(TextPart(text="be brief"),)),
        Message(
            role="user",
            parts=(
                TextPart(text="look"),
                ImagePart(format="png", data=b"\x89PNG"),
                ImagePart(format="jpeg", url="https://example.com/a.jpg"),
                DocumentPart(name="report", format="pdf", data=b"%PDF"),
                DocumentPart(name="sheet", format="csv", uri="https://example.com/s.csv"),
                CacheCheckpointPart(),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                ThinkingPart(text="plan", signature="sig-1", index=0, final=True),
                TextPart(text="calling"),
                ToolUsePart(id="call-1", name="lookup", input={"q": "x"}),
            ),
        ),
        Message(
            role="user",
            parts=(ToolResultPart(tool_use_id="call-1", content="boom", is_error=True),),
        ),
    ]
    system, user, response, result = to_pydantic_ai(transcript, timestamp=AT)
    assert system == pai.ModelRequest(
        parts=[pai.SystemPromptPart("be brief", timestamp=AT)],
        metadata={STAMPED: AT.isoformat()},  # the time was this conversion's, not the transcript's
    )
    (prompt,) = user.parts
    assert isinstance(prompt, pai.UserPromptPart)
    text, image, url, pdf, sheet, cache = prompt.content
    assert text == "look"
    assert image == pai.BinaryContent(b"\x89PNG", media_type="image/png")
    assert url == pai.ImageUrl("https://example.com/a.jpg", media_type="image/jpeg")
    assert (pdf.data, pdf.media_type, pdf.identifier) == (b"%PDF", "application/pdf", "report")
    assert (sheet.url, sheet.media_type, sheet.identifier) == (
        "https://example.com/s.csv",
        "text/csv",
        "sheet",
    )
    assert cache == pai.CachePoint()
    assert isinstance(response, pai.ModelResponse)
    assert response.parts == [
        pai.ThinkingPart("plan", signature="sig-1"),
        pai.TextPart("calling"),
        pai.ToolCallPart("lookup", {"q": "x"}, "call-1"),
    ]
    assert result.parts == [
        pai.ToolReturnPart("lookup", "boom", "call-1", timestamp=AT, outcome="failed")
    ]
    assert from_pydantic_ai([system, user, response, result], timestamps=False) == transcript


# ------------------------------------------------------------------ real Agent runs


def _script() -> list[pai.ModelResponse]:
    """Thinking with signatures, parallel calls (one with bad arguments), a fix, an answer the
    output validator refuses, the right answer; then the answer to a second run."""
    return [
        pai.ModelResponse(
            parts=[
                pai.ThinkingPart(
                    "two sums", signature="sig-1", id="th-1", provider_name="anthropic"
                ),
                pai.ToolCallPart("add", {"a": 2, "b": 2.5}, tool_call_id="call-1"),
                pai.ToolCallPart("add", {"a": 1}, tool_call_id="call-2"),
            ],
            model_name="scripted",
            provider_response_id="resp-1",
        ),
        pai.ModelResponse(
            parts=[
                pai.ThinkingPart("fix the call", signature="sig-2", provider_name="anthropic"),
                pai.ToolCallPart("add", '{"a": 1, "b": 2}', tool_call_id="call-3"),
            ]
        ),
        pai.ModelResponse(parts=[pai.TextPart("total: 7.5")]),
        pai.ModelResponse(parts=[pai.TextPart("The total is 7.5.")]),
        pai.ModelResponse(parts=[pai.TextPart("The total is still 7.5.")]),
    ]


def _function_agent() -> Agent[None, str]:
    script = _script()

    def scripted(messages: list[pai.ModelMessage], info: AgentInfo) -> pai.ModelResponse:
        return script.pop(0)

    agent = Agent(FunctionModel(scripted), system_prompt="You add.", instructions="Be exact.")

    @agent.tool_plain(retries=2)
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @agent.output_validator
    def must_say_the_total(output: str) -> str:
        if not output.startswith("The total"):
            raise ModelRetry("Start with 'The total'.")
        return output

    return agent


def _assert_lossless(history: list[pai.ModelMessage]) -> list[Message]:
    transcript = from_pydantic_ai(history)
    validate_planner_transcript(transcript)
    assert to_pydantic_ai(transcript) == history
    dumped = pai.ModelMessagesTypeAdapter.dump_json(to_pydantic_ai(transcript))
    assert dumped == pai.ModelMessagesTypeAdapter.dump_json(history)
    return transcript


async def test_a_function_model_run_converts_and_validates() -> None:
    """Thinking, parallel calls, a retried call, retry feedback, an image and a document."""
    agent = _function_agent()
    prompt = [
        "Add these.",
        pai.BinaryContent(b"\x89PNG", media_type="image/png"),
        pai.BinaryContent(b"%PDF", media_type="application/pdf", identifier="sums.pdf"),
    ]
    run = await agent.run(prompt)
    assert run.output == "The total is 7.5."
    history = run.all_messages()
    transcript = _assert_lossless(history)
    assert [m.role for m in transcript] == [
        "system", "user", "assistant", "user", "assistant", "user", "assistant", "user",
        "assistant",
    ]  # fmt: skip
    assert transcript[1].parts == (
        TextPart(text="Add these."),
        ImagePart(format="png", data=b"\x89PNG"),
        DocumentPart(name="sums.pdf", format="pdf", data=b"%PDF"),
    )
    thinking, first, second = transcript[2].parts
    assert thinking == ThinkingPart(text="two sums", signature="sig-1", final=True)
    assert first == ToolUsePart(id="call-1", name="add", input={"a": 2, "b": 2.5})
    assert second == ToolUsePart(id="call-2", name="add", input={"a": 1})
    ok, retried = transcript[3].parts
    assert ok == ToolResultPart(tool_use_id="call-1", content=4.5)
    assert isinstance(retried, ToolResultPart)
    assert retried.is_error
    assert transcript[3].meta is not None
    assert transcript[3].meta["pydantic_ai"]["parts"]["1"]["part"]["outcome"] == "retried"
    (feedback,) = transcript[7].parts
    assert isinstance(feedback, TextPart)
    assert "Start with 'The total'." in feedback.text
    # the converted history carries on: a second run continues from it
    again = await agent.run("Again?", message_history=to_pydantic_ai(transcript))
    assert again.output == "The total is still 7.5."
    _assert_lossless(again.all_messages())


async def test_a_test_model_run_with_tools_converts_and_validates() -> None:
    """pydantic-ai's TestModel calls every tool, then answers; both turns convert."""
    agent = Agent(TestModel(), system_prompt="Use the tools.")

    @agent.tool_plain
    def weather(city: str) -> str:
        """The weather."""
        return f"sunny in {city}"

    @agent.tool_plain
    def population(city: str, year: int) -> dict[str, Any]:
        """A population figure."""
        return {"city": city, "year": year, "millions": 2.1}

    first = await agent.run("Tell me about Paris.")
    history = first.all_messages()
    transcript = _assert_lossless(history)
    calls = [p for m in transcript for p in m.parts if isinstance(p, ToolUsePart)]
    results = [p for m in transcript for p in m.parts if isinstance(p, ToolResultPart)]
    assert sorted(c.name for c in calls) == ["population", "weather"]
    assert {r.tool_use_id for r in results} == {c.id for c in calls}
    second = await agent.run("And Oslo?", message_history=to_pydantic_ai(transcript))
    _assert_lossless(second.all_messages())


# ------------------------------------------------------------------ what one side cannot carry


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (Message(role="assistant", parts=(ThinkingPart(redacted=b"x"),)), "thinking"),
        (
            Message(role="assistant", parts=(CitationsPart(text="t", citations=(Citation(),)),)),
            "citations",
        ),
        (Message(role="user", parts=(DocumentPart(name="d", text="body"),)), "document"),
        (
            Message(
                role="user", parts=(DocumentPart(name="d", format="pdf", data=b"x", cite=True),)
            ),
            "document",
        ),
        (Message(role="user", parts=(DocumentPart(name="d", data=b"x"),)), "document"),
        (Message(role="system", parts=(CacheCheckpointPart(),)), "cache_checkpoint"),
        (Message(role="assistant", parts=(CacheCheckpointPart(),)), "cache_checkpoint"),
        (Message(role="assistant", parts=(ImagePart(format="png", url="u"),)), "image"),
        (
            Message(role="user", parts=(ToolResultPart(tool_use_id="nobody", content=1),)),
            "tool_result",
        ),
    ],
)
def test_parts_pydantic_ai_cannot_carry_are_named(message: Message, kind: str) -> None:
    transcript = [Message(role="user", parts=(TextPart(text="hi"),)), message]
    with pytest.raises(TranscriptError) as caught:
        to_pydantic_ai(transcript)
    assert (caught.value.message_index, caught.value.part_index) == (1, 0)
    assert caught.value.got == kind
    assert caught.value.field == "messages[1].parts[0]"


@pytest.mark.parametrize(
    ("part", "kind"),
    [
        (pai.UserPromptPart([pai.BinaryContent(b"RIFF", media_type="audio/wav")]), "binary"),
        (pai.UserPromptPart([pai.VideoUrl("https://example.com/v.mp4")]), "video-url"),
        (pai.UserPromptPart([pai.TextContent("note", metadata={1, 2})]), "text-content"),
        (pai.ToolReturnPart("clock", AT, "call-1"), "tool-return"),
        (pai.ToolReturnPart("clock", [pai.AudioUrl("https://e.com/a.mp3")], "call-1"), "audio"),
    ],
)
def test_pydantic_ai_parts_agentledger_cannot_carry_are_named(part: Any, kind: str) -> None:
    call = pai.ModelResponse(parts=[pai.ToolCallPart("clock", {}, "call-1")])
    history = [pai.ModelRequest(parts=[pai.UserPromptPart("hi")]), call, pai.ModelRequest([part])]
    with pytest.raises(TranscriptError) as caught:
        from_pydantic_ai(history)
    assert (caught.value.message_index, caught.value.part_index) == (2, 0)
    assert kind in str(caught.value.got)
    assert caught.value.field == "model_messages[2].parts[0]"


def test_a_native_tool_call_is_named() -> None:
    history = [
        pai.ModelResponse(
            parts=[pai.TextPart("ok"), pai.NativeToolCallPart("web_search", {"q": "x"}, "ws-1")]
        )
    ]
    with pytest.raises(TranscriptError) as caught:
        from_pydantic_ai(history)
    assert (caught.value.message_index, caught.value.part_index) == (0, 1)
    assert caught.value.got == "builtin-tool-call"


def test_edited_text_that_no_longer_matches_its_saved_form_is_refused() -> None:
    """Saved pydantic-ai fields never silently override what the transcript says."""
    history = [
        pai.ModelRequest(parts=[pai.UserPromptPart("add")]),
        pai.ModelResponse(parts=[pai.ToolCallPart("add", '{"a": 1}', "call-1")]),
    ]
    user, assistant = from_pydantic_ai(history)
    edited = Message(
        role="assistant",
        parts=(ToolUsePart(id="call-1", name="add", input={"a": 2}),),
        meta=assistant.meta,
    )
    with pytest.raises(TranscriptError) as caught:
        to_pydantic_ai([user, edited])
    assert (caught.value.message_index, caught.value.part_index) == (1, 0)


def test_pydantic_ai_shapes_come_back_exactly() -> None:
    """Prompt boundaries, str-or-list content, inferred media types, identifiers, vendor
    metadata, cache TTLs, provider details and message metadata all survive the trip."""
    image_url = pai.ImageUrl("https://example.com/cat.png", vendor_metadata={"detail": "low"})
    document_url = pai.DocumentUrl("https://example.com/a.pdf", force_download=True)
    narrowed = pai.BinaryContent.narrow_type(pai.BinaryContent(b"GIF8", media_type="image/gif"))
    unnamed = pai.BinaryContent(b"a,b", media_type="text/csv")
    history: list[Any] = [
        pai.ModelRequest(
            parts=[
                pai.SystemPromptPart("sys", timestamp=AT, dynamic_ref="r"),
                pai.UserPromptPart(["a"], timestamp=AT),
                pai.UserPromptPart("b", timestamp=AT),
                pai.UserPromptPart(
                    [image_url, document_url, narrowed, unnamed, pai.CachePoint(ttl="1h")],
                    timestamp=AT,
                ),
            ],
            metadata={"tenant": "acme", "agentledger_meta": {"openai": {"id": "resp-9"}}},
            instructions="Be exact.",
        ),
        pai.ModelResponse(
            parts=[
                pai.ThinkingPart("", signature="", provider_details={"raw": [1]}),
                pai.TextPart("hi", id="msg-1", provider_name="openai"),
                pai.ToolCallPart("now", None, "call-1", id="fc-1"),
                pai.FilePart(pai.BinaryContent(b"\x89PNG", media_type="image/png")),
            ],
            timestamp=AT,
            finish_reason="tool_call",
        ),
        pai.ModelRequest(parts=[pai.ToolReturnPart("now", "12:00", "call-1", timestamp=AT)]),
    ]
    with pytest.raises(TranscriptError):
        from_pydantic_ai(history)  # empty thinking: agentledger needs text or a signature
    history[1].parts[0] = pai.ThinkingPart("", signature="s", provider_details={"raw": [1]})
    transcript = from_pydantic_ai(history)
    assert [m.role for m in transcript] == ["system", "user", "assistant", "user"]
    assert transcript[0].meta is not None
    assert transcript[0].meta["openai"] == {"id": "resp-9"}  # foreign meta back where it was
    back = to_pydantic_ai(transcript)
    assert back == history
    (_, _, _, prompt) = back[0].parts
    url, doc, gif, csv, _ = prompt.content
    assert (url._media_type, url.vendor_metadata) == (None, {"detail": "low"})
    assert (doc._media_type, doc.force_download, doc._identifier) == (None, True, None)
    assert type(gif) is pai.BinaryImage
    assert csv._identifier is None
    assert transcript[1].parts[-2] == DocumentPart(
        name=unnamed.identifier, format="csv", data=b"a,b"
    )


def test_malformed_saved_fields_are_a_transcript_error() -> None:
    """``meta["pydantic_ai"]`` is read strictly: an unknown shape is refused, not guessed at."""
    bad = Message(role="user", parts=(TextPart(text="hi"),), meta={"pydantic_ai": {"oops": 1}})
    with pytest.raises(TranscriptError) as caught:
        to_pydantic_ai([bad])
    assert caught.value.field == "messages[0].meta.pydantic_ai"
    wrong = Message(
        role="user",
        parts=(TextPart(text="hi"),),
        meta={"pydantic_ai": {"message": {"no_such_field": 1}}},
    )
    with pytest.raises(TranscriptError) as caught:
        to_pydantic_ai([wrong])
    assert caught.value.field == "messages[0].meta.pydantic_ai.message.no_such_field"

    for saved in ({"items": 5}, {"items": "x"}, {"str": True}, {"item": {"ttl": "2h"}}):
        meta = {"pydantic_ai": {"parts": {"0": saved}}}
        parts = (TextPart(text="a"), CacheCheckpointPart())
        if "item" in saved:
            parts = (CacheCheckpointPart(),)
        with pytest.raises(TranscriptError) as caught:
            to_pydantic_ai([Message(role="user", parts=parts, meta=meta)])
        assert caught.value.message_index == 0


def test_a_legacy_retry_prompt_is_read_as_pydantic_ai_reads_it() -> None:
    """The deprecated RetryPromptPart: a tool's is its call's retried result, else feedback."""
    with pytest.warns(Warning, match="RetryPromptPart. is deprecated"):
        for_tool = pai.RetryPromptPart("missing b", tool_name="add", tool_call_id="call-1")
    with pytest.warns(Warning, match="RetryPromptPart. is deprecated"):
        for_output = pai.RetryPromptPart("say it politely")
    history = [
        pai.ModelRequest(parts=[pai.UserPromptPart("add")]),
        pai.ModelResponse(parts=[pai.ToolCallPart("add", {"a": 1}, "call-1")]),
        pai.ModelRequest(parts=[for_tool]),
        pai.ModelResponse(parts=[pai.TextPart("rude")]),
        pai.ModelRequest(parts=[for_output]),
    ]
    transcript = from_pydantic_ai(history)
    validate_planner_transcript(transcript)
    assert transcript[2].parts == (
        ToolResultPart(tool_use_id="call-1", content="missing b", is_error=True),
    )
    (feedback,) = transcript[4].parts
    assert isinstance(feedback, TextPart)
    assert "say it politely" in feedback.text
    back = to_pydantic_ai(transcript)
    (retried,) = back[2].parts
    assert isinstance(retried, pai.ToolReturnPart)
    assert (retried.outcome, retried.content) == ("retried", "missing b")
    (again,) = back[4].parts
    assert isinstance(again, pai.RetryFeedbackPart)
    assert again.content == "say it politely"


# ------------------------------------------------------------------ carried since pydantic-ai 2.68


PNG = pai.BinaryContent(b"\x89PNG", media_type="image/png")


def _round_trip(history: list[Any]) -> list[Message]:
    transcript = from_pydantic_ai(history)
    assert to_pydantic_ai(transcript, timestamp=AT) == history
    return transcript


def test_tool_returns_with_files_carry_them_as_parts() -> None:
    """Images and documents a tool returned (inline, by URL or uploaded) become parts after the
    tool results, so the planner's transcript is valid; the content comes back in place."""
    call = pai.ModelResponse(
        parts=[pai.ToolCallPart(n, {}, f"c-{n}") for n in ("shot", "pdf", "upload", "plain")],
        timestamp=AT,
    )
    pdf = pai.BinaryContent(b"%PDF", media_type="application/pdf")
    shot = ["see", PNG, {"n": 1.5}, pai.ImageUrl("https://e.com/i.png")]
    returns = pai.ModelRequest(
        parts=[
            pai.ToolReturnPart("shot", shot, "c-shot", timestamp=AT),
            pai.ToolReturnPart("pdf", pdf, "c-pdf", timestamp=AT),
            pai.ToolReturnPart("upload", pai.UploadedFile("file-9", "openai"), "c-upload"),
            pai.ToolReturnPart("plain", [1, 2], "c-plain", timestamp=AT),
            pai.UserPromptPart(["and this", PNG], timestamp=AT),
        ],
        timestamp=AT,
    )
    prompt = pai.ModelRequest(parts=[pai.UserPromptPart("look", timestamp=AT)], timestamp=AT)
    transcript = _round_trip([prompt, call, returns])
    validate_planner_transcript(transcript)
    parts = transcript[2].parts
    assert [p.content for p in parts[:4] if isinstance(p, ToolResultPart)] == [
        ["see", {"n": 1.5}], None, None, [1, 2],
    ]  # fmt: skip
    assert parts[4:9] == (
        ImagePart(format="png", data=b"\x89PNG"),
        ImagePart(format="png", url="https://e.com/i.png"),
        DocumentPart(name=parts[6].name, format="pdf", data=b"%PDF"),  # type: ignore[union-attr]
        DocumentPart(name=parts[7].name, uri="file-9"),  # type: ignore[union-attr]
        TextPart(text="and this"),
    )


def test_uploaded_files_and_text_with_metadata_in_a_prompt() -> None:
    """An ``UploadedFile`` is an image or document named by its file id; ``TextContent`` is its
    text, its metadata kept for the way back."""
    uploaded_image = pai.UploadedFile(
        "f.png", "anthropic", media_type="image/png", vendor_metadata={"detail": "high"}
    )
    prompt = pai.UserPromptPart(
        [
            "hi",
            pai.TextContent("note", metadata={"source": ["crm", 2]}),
            pai.UploadedFile("file-1", "openai", identifier="report"),
            uploaded_image,
        ],
        timestamp=AT,
    )
    (message,) = _round_trip([pai.ModelRequest(parts=[prompt], timestamp=AT)])
    assert message.parts == (
        TextPart(text="hi"),
        TextPart(text="note"),
        DocumentPart(name="report", uri="file-1"),
        ImagePart(format="png", url="f.png"),
    )


def test_tool_availability_deltas_ride_in_meta() -> None:
    """Deferred tools' availability deltas have no transcript part: kept in meta, in place."""
    delta = pai.ToolAvailabilityDeltaPart(tools_added=["search"], tool_call_id="t-1")
    history = [
        pai.ModelRequest(
            parts=[
                pai.SystemPromptPart("be brief", timestamp=AT),
                pai.ToolAvailabilityDeltaPart(tools_added=["a", "b"]),
                pai.UserPromptPart("one", timestamp=AT),
                delta,
                pai.UserPromptPart("two", timestamp=AT),
            ],
            timestamp=AT,
        ),
        pai.ModelRequest(parts=[delta], timestamp=AT),
    ]
    transcript = _round_trip(history)
    assert [m.parts for m in transcript] == [
        (TextPart(text="be brief"),),
        (TextPart(text="one"), TextPart(text="two")),
        (),
    ]
    assert transcript[2].meta == {
        "pydantic_ai": {
            "message": {"timestamp": "2026-05-06T07:08:09.123456Z"},
            "carried": [{"at": 0, "part": pydantic.TypeAdapter(Any).dump_python(delta)}],
        }
    }
    broken = Message(role="user", parts=(), meta={"pydantic_ai": {"carried": [{"at": 3}]}})
    with pytest.raises(TranscriptError) as caught:
        to_pydantic_ai([broken])
    assert caught.value.field == "messages[0].meta.pydantic_ai.carried[0].at"


@settings(max_examples=30, deadline=None)
@given(transcript=shared_transcripts())
def test_a_transcript_comes_back_exactly_with_timestamps_kept(transcript: list[Message]) -> None:
    """to then from is the identity with the default timestamps=True: the times the
    conversion stamped are not taken for pydantic-ai's own; and from then to gives
    the same history back, stamps included."""
    history = to_pydantic_ai(transcript)
    assert from_pydantic_ai(history) == transcript
    stamped = to_pydantic_ai(transcript, timestamp=AT)
    assert to_pydantic_ai(from_pydantic_ai(stamped), timestamp=AT) == stamped


# ------------------------------------------------------------------ after storage, and refusals


def _stored(history: list[Any]) -> list[pai.ModelMessage]:
    """``history`` through a transcript, its stored bytes, and back."""
    return to_pydantic_ai(decode_messages(encode_messages(from_pydantic_ai(history))))


def _floats(value: Any) -> list[type]:
    """The types of every non-int number in ``value`` (floats only, when all is well)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _floats(v)]
    if isinstance(value, list):
        return [t for v in value for t in _floats(v)]
    return [] if isinstance(value, int | str | bool) or value is None else [type(value)]


def test_numbers_come_back_as_numbers_after_storage() -> None:
    """Tool-call arguments, tool-return content, metadata and retry feedback: floats stay floats."""
    feedback = [{"type": "int_from_float", "loc": ("x",), "msg": "not an int", "input": 2.5}]
    history: list[Any] = [
        pai.ModelRequest(parts=[pai.UserPromptPart("halve", timestamp=AT)], metadata={"w": 0.75}),
        pai.ModelResponse(
            parts=[pai.ToolCallPart("half", {"n": 1.5, "deep": [{"x": 0.1}]}, "c1")],
            timestamp=AT,
        ),
        pai.ModelRequest(
            parts=[pai.ToolReturnPart("half", {"half": 0.75, "all": [0.25]}, "c1", timestamp=AT)]
        ),
        pai.ModelResponse(parts=[pai.TextPart("0.75")], timestamp=AT),
        pai.ModelRequest(
            parts=[
                pai.RetryFeedbackPart(
                    feedback, retry=pai.RetryInfo(cause="validation_error"), timestamp=AT
                )
            ]
        ),
    ]
    back = _stored(history)
    assert pai.ModelMessagesTypeAdapter.dump_json(back) == pai.ModelMessagesTypeAdapter.dump_json(
        history
    )
    call = back[1].parts[0]
    result = back[2].parts[0]
    retry = back[4].parts[0]
    assert isinstance(call, pai.ToolCallPart)
    assert isinstance(result, pai.ToolReturnPart)
    assert isinstance(retry, pai.RetryFeedbackPart)
    assert set(_floats(call.args)) == {float}
    assert set(_floats(result.content)) == {float}
    assert set(_floats(back[0].metadata)) == {float}
    assert retry.content == feedback
    assert retry.model_response() == history[4].parts[0].model_response()


PNG_INLINE = pai.BinaryContent(b"\x89PNG", media_type="image/png")
WAV = pai.BinaryContent(b"RIFF", media_type="audio/wav")
MP3 = pai.AudioUrl("https://e.com/a.mp3")
MP4 = pai.VideoUrl("https://e.com/v.mp4")


def _returned(content: Any) -> pai.ToolReturnPart:
    return pai.ToolReturnPart("t", content, "call-1")


@pytest.mark.parametrize(
    ("part", "kind", "path"),
    [
        (pai.UserPromptPart([WAV]), "user-prompt binary", ""),
        (pai.UserPromptPart([MP3]), "user-prompt audio-url", ""),
        (pai.UserPromptPart([MP4]), "user-prompt video-url", ""),
        (_returned(WAV), "tool-return binary", ""),
        (_returned([MP3]), "tool-return audio-url", ""),
        (_returned(MP4), "tool-return video-url", ""),
        (_returned({"img": PNG_INLINE}), "tool-return binary", "content['img']"),
        (_returned([1, {"a": [PNG_INLINE]}]), "tool-return binary", "content[1]['a'][0]"),
        (_returned(bytearray(b"x")), "tool-return bytearray", ""),
        (_returned([PNG_INLINE, b"x"]), "tool-return bytes", "content[1]"),
    ],
)
def test_what_agentledger_cannot_carry_is_refused_by_its_own_name(
    part: Any, kind: str, path: str
) -> None:
    """Audio and video, and files or bytes inside a tool return's JSON, are named as such."""
    call = pai.ModelResponse(parts=[pai.ToolCallPart("t", {}, "call-1")])
    history = [pai.ModelRequest(parts=[pai.UserPromptPart("hi")]), call, pai.ModelRequest([part])]
    with pytest.raises(TranscriptError) as caught:
        from_pydantic_ai(history)
    assert caught.value.got == kind
    assert (caught.value.message_index, caught.value.part_index) == (2, 0)
    assert path in str(caught.value)
