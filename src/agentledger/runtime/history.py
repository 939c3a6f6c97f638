"""History policies: how much of a conversation each planner turn sends the model [V5].

A policy looks at the transcript a turn would send and may say where to
start instead: keep the last N turns (:class:`LastTurns`), keep within a
token budget (:class:`TokenBudget`), or, past a threshold, have a model
summarise the oldest turns and start after them (:class:`Compaction`).

A policy only cuts where a turn begins (a user message that answers no tool
call), so it never separates a tool call from its result, and it always keeps
the newest user message; the system prompt is the planner's and is never cut.
The runtime records each cut with the turn that made it (a
``transcript_window_applied`` record), so replaying the log gives exactly
what the model was sent, and a later turn's replay reads only from the cut.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from agentledger.errors import ValidationError
from agentledger.providers.model import ModelClient, ModelRequest, ToolDefinition
from agentledger.runtime.planner import ModelUsage, RunContext
from agentledger.transcript import (
    CitationsPart,
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
)

__all__ = [
    "Compaction",
    "HistoryContext",
    "HistoryCut",
    "HistoryPolicy",
    "LastTurns",
    "TokenBudget",
    "TokenCounter",
    "estimate_tokens",
    "turn_starts",
]

TokenCounter = Callable[[ModelRequest], Awaitable[int]]
"""Counts the input tokens of a request (for example a provider's own counting)."""

SUMMARY_HEADER = "Summary of the conversation before this message (it replaces it):\n\n"
"""What a compaction's summary text starts with, so the model reads it as a summary."""

DEFAULT_INSTRUCTIONS = (
    "You summarise conversations between a user and an AI assistant so that the "
    "assistant can continue without the original messages. Keep every fact, decision, "
    "open question, name, number and tool result the assistant may still need; drop "
    "pleasantries. Write plain prose, at most a few paragraphs."
)
"""The default system prompt of :class:`Compaction`'s summariser."""


def turn_starts(messages: Sequence[Message]) -> list[int]:
    """The indexes of the messages that begin a turn: user messages that answer no tool
    call. Cutting there never separates a tool call from its result."""
    return [
        i
        for i, m in enumerate(messages)
        if m.role == "user" and not any(isinstance(p, ToolResultPart) for p in m.parts)
    ]


def estimate_tokens(request: ModelRequest) -> int:
    """A provider-free estimate of a request's input tokens: about four characters of
    text (JSON for tool calls, results and definitions) per token, four tokens of
    overhead per message, and 1,500 per image or binary document. Deterministic, and
    within the usual 10-20% of real tokenizers for English prose."""
    chars = 0
    fixed = 0
    for message in request.messages:
        fixed += 4
        for part in message.parts:
            if isinstance(part, TextPart | CitationsPart | ThinkingPart):
                chars += len(part.text)
            elif isinstance(part, ToolUsePart):
                chars += len(part.name) + len(json.dumps(part.input, default=str))
            elif isinstance(part, ToolResultPart):
                chars += len(json.dumps(part.content, default=str))
            elif isinstance(part, DocumentPart) and part.text is not None:
                chars += len(part.text)
            elif isinstance(part, DocumentPart) and part.chunks is not None:
                chars += sum(len(c) for c in part.chunks)
            elif isinstance(part, ImagePart | DocumentPart):
                fixed += 1500
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(tool.input_schema))
    return fixed + math.ceil(chars / 4)


async def _estimated(request: ModelRequest) -> int:
    return estimate_tokens(request)


class HistoryCut(msgspec.Struct, frozen=True, kw_only=True):
    """A policy's answer: start the model input at message ``start`` of the transcript
    it was given; a compaction also gives the ``summary`` text put before that message,
    the model that wrote it, its prompt's id and version, and the tokens it used."""

    start: int
    summary: str = ""
    model: str = ""
    prompt_id: str = ""
    prompt_version: str = ""
    usage: ModelUsage | None = None


class HistoryContext:
    """What a policy may use: the run, the turn, token counting and the models."""

    def __init__(
        self,
        *,
        run: RunContext,
        system: str,
        tools: tuple[ToolDefinition, ...],
        model_name: str,
        counter: TokenCounter | None,
        models: Callable[[str], ModelClient],
    ) -> None:
        self.run = run
        self.system = system
        """The system prompt the turn sends (counted with the messages)."""
        self.tools = tools
        self.model_name = model_name
        """The model the planner asks (what a provider's counting is asked about)."""
        self._counter = counter
        self._models = models

    async def count_tokens(
        self, messages: Sequence[Message], counter: TokenCounter | None = None
    ) -> int:
        """Input tokens of a request with the system prompt, these messages and the tools,
        counted by ``counter``, else the provider's counting, else :func:`estimate_tokens`."""
        head = (Message(role="system", parts=(TextPart(text=self.system),)),) if self.system else ()
        request = ModelRequest(model=self.model_name, messages=(*head, *messages), tools=self.tools)
        count = counter or self._counter or _estimated
        return int(await count(request))

    def model(self, model_id: str) -> ModelClient:
        """The model client registered as ``model_id``."""
        return self._models(model_id)


@runtime_checkable
class HistoryPolicy(Protocol):
    """Decides where a turn's model input starts. ``name`` is recorded with each cut."""

    @property
    def name(self) -> str:
        """What the recorded cut names as its policy (for example ``last_turns:20``)."""
        ...

    async def cut(
        self, messages: Sequence[Message], context: HistoryContext, /
    ) -> HistoryCut | None:
        """Where to start within ``messages`` (None: send them all). ``start`` must be a
        turn's start (see :func:`turn_starts`), and at most the newest one's."""
        ...


class LastTurns:
    """Keep the last ``turns`` turns (a turn is a user message and everything it led to)."""

    def __init__(self, turns: int) -> None:
        if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
            raise ValidationError(field="LastTurns.turns", expected="an int >= 1", got=turns)
        self.turns = turns

    @property
    def name(self) -> str:
        return f"last_turns:{self.turns}"

    async def cut(
        self, messages: Sequence[Message], context: HistoryContext, /
    ) -> HistoryCut | None:
        starts = turn_starts(messages)
        if len(starts) <= self.turns or starts[-self.turns] == 0:
            return None
        return HistoryCut(start=starts[-self.turns])

    def __repr__(self) -> str:
        return f"LastTurns({self.turns})"


async def _fitting(
    messages: Sequence[Message],
    context: HistoryContext,
    budget: int,
    counter: TokenCounter | None,
) -> int:
    """The earliest turn start (after the first message) whose suffix fits ``budget``
    tokens, else the newest turn's start: a binary search, so a provider's counting is
    asked O(log turns) times."""
    starts = [s for s in turn_starts(messages) if s > 0]
    if not starts:
        return 0
    low, high = 0, len(starts) - 1
    while low < high:
        mid = (low + high) // 2
        if await context.count_tokens(messages[starts[mid] :], counter) <= budget:
            high = mid
        else:
            low = mid + 1
    return starts[low]


class TokenBudget:
    """Keep the newest whole turns that fit ``max_tokens`` input tokens (system prompt and
    tool definitions included); the newest turn is kept even if it alone does not fit.

    Args:
        max_tokens: the input budget.
        counter: counts a request's tokens; default: the planner's model client's
            ``count_tokens`` if it has one, else :func:`estimate_tokens`.
    """

    def __init__(self, max_tokens: int, *, counter: TokenCounter | None = None) -> None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValidationError(
                field="TokenBudget.max_tokens", expected="an int >= 1", got=max_tokens
            )
        self.max_tokens = max_tokens
        self.counter = counter

    @property
    def name(self) -> str:
        return f"token_budget:{self.max_tokens}"

    async def cut(
        self, messages: Sequence[Message], context: HistoryContext, /
    ) -> HistoryCut | None:
        if await context.count_tokens(messages, self.counter) <= self.max_tokens:
            return None
        start = await _fitting(messages, context, self.max_tokens, self.counter)
        return HistoryCut(start=start) if start > 0 else None

    def __repr__(self) -> str:
        return f"TokenBudget({self.max_tokens})"


class Compaction:
    """Past ``threshold_tokens``, a model summarises the oldest turns and the input
    continues from the summary and the newest turns that fit ``keep_tokens``.

    The summary (and the earlier summary it absorbs) is recorded with the turn, with
    the records it replaces, the model and this prompt's id and version. A summariser
    that fails leaves the history as it was: the turn goes on with every message.

    Args:
        model_id: the registered model that writes summaries.
        threshold_tokens: compact when a turn's input would exceed this.
        keep_tokens: what the kept turns may take (default: half the threshold).
        model: the provider's model name (default: ``model_id``).
        instructions: the summariser's system prompt.
        prompt_id: the recorded id of that prompt.
        prompt_version: its recorded version.
        max_tokens: the summary's token budget.
        counter: as for :class:`TokenBudget`.
    """

    def __init__(
        self,
        model_id: str,
        *,
        threshold_tokens: int = 8000,
        keep_tokens: int | None = None,
        model: str = "",
        instructions: str = DEFAULT_INSTRUCTIONS,
        prompt_id: str = "agentledger.compaction",
        prompt_version: str = "1",
        max_tokens: int = 1024,
        counter: TokenCounter | None = None,
    ) -> None:
        if not isinstance(threshold_tokens, int) or threshold_tokens < 2:
            raise ValidationError(
                field="Compaction.threshold_tokens", expected="an int >= 2", got=threshold_tokens
            )
        keep = threshold_tokens // 2 if keep_tokens is None else keep_tokens
        if not isinstance(keep, int) or not 1 <= keep < threshold_tokens:
            raise ValidationError(
                field="Compaction.keep_tokens",
                expected=f"an int from 1 to {threshold_tokens - 1}",
                got=keep_tokens,
            )
        self.model_id = model_id
        self.threshold_tokens = threshold_tokens
        self.keep_tokens = keep
        self.model = model or model_id
        self.instructions = instructions
        self.prompt_id = prompt_id
        self.prompt_version = prompt_version
        self.max_tokens = max_tokens
        self.counter = counter

    @property
    def name(self) -> str:
        return f"compaction:{self.threshold_tokens}"

    async def cut(
        self, messages: Sequence[Message], context: HistoryContext, /
    ) -> HistoryCut | None:
        if await context.count_tokens(messages, self.counter) <= self.threshold_tokens:
            return None
        start = await _fitting(messages, context, self.keep_tokens, self.counter)
        if start <= 0:
            return None
        request = ModelRequest(
            model=self.model,
            messages=(
                Message(role="system", parts=(TextPart(text=self.instructions),)),
                Message(role="user", parts=(TextPart(text=_summary_request(messages[:start])),)),
            ),
            max_tokens=self.max_tokens,
        )
        response = await context.model(self.model_id).complete(request)
        text = "".join(p.text for p in response.message.parts if isinstance(p, TextPart)).strip()
        if not text:
            raise ValueError("the summariser answered without text")
        usage = response.usage
        return HistoryCut(
            start=start,
            summary=SUMMARY_HEADER + text,
            model=response.model or self.model,
            prompt_id=self.prompt_id,
            prompt_version=self.prompt_version,
            usage=ModelUsage(
                model=response.model or self.model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            ),
        )

    def __repr__(self) -> str:
        return f"Compaction({self.model_id!r}, threshold_tokens={self.threshold_tokens})"


_RESULT_CHARS = 2000
"""A tool result longer than this is shortened in what the summariser reads."""


def _summary_request(messages: Sequence[Message]) -> str:
    """The conversation as text for the summariser: plain text travels to any provider,
    where tool calls without tool definitions would be refused."""
    lines = ["Summarise this conversation:", ""]
    for message in messages:
        texts: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart | CitationsPart):
                texts.append(part.text)
            elif isinstance(part, ToolUsePart):
                texts.append(f"[called tool {part.name} with {_json(part.input)}]")
            elif isinstance(part, ToolResultPart):
                kind = "error" if part.is_error else "result"
                texts.append(f"[tool {kind}: {_json(part.content)[:_RESULT_CHARS]}]")
            elif isinstance(part, ImagePart):
                texts.append("[an image]")
            elif isinstance(part, DocumentPart):
                texts.append(f"[document {part.name}]")
        if texts:
            lines.append(f"{message.role}: " + "\n".join(texts))
    return "\n\n".join(lines)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)
