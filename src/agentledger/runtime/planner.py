"""The planner contract: what an agent's decision maker gets and returns.

A planner sees the run's whole transcript (``await input.prepare_messages()``,
memoised [R3]) and answers with a :class:`PlanResult`: tool calls to run, a
final assistant message, or an ``await_`` that suspends the run for outside
input. Results are msgspec Structs because they cross the activity boundary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from agentledger.providers.model import ModelClient, ModelStreamEvent, ToolDefinition
from agentledger.transcript import Message, TextPart, ToolUsePart

__all__ = [
    "Answer",
    "Await",
    "AwaitClarification",
    "AwaitConfirmation",
    "AwaitExternalTools",
    "ModelUsage",
    "Note",
    "PlanInput",
    "PlanResult",
    "PlanResumeInput",
    "Planner",
    "PromptRenderer",
    "RenderedPrompt",
    "RunContext",
    "ToolCall",
    "ToolDecision",
    "ToolFailed",
    "ToolHappened",
    "ToolOutcome",
    "ToolRetry",
]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call a planner asks for; ``id`` is unique in the run's transcript."""

    id: str
    name: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)

    def part(self) -> ToolUsePart:
        """The transcript part of this call."""
        return ToolUsePart(id=self.id, name=self.name, input=self.input)


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one tool call produced: JSON content, or error text when ``is_error``."""

    tool_call_id: str
    tool_name: str
    content: Any = None
    is_error: bool = False


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """A planner's remark for the log and the stream (not sent to the model)."""

    text: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class ModelUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens one model call used, recorded as ``model_usage``."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


class AwaitClarification(msgspec.Struct, frozen=True, kw_only=True, tag="clarification"):
    """The planner needs an answer from the user; resume with the answer text."""

    question: str


class AwaitConfirmation(msgspec.Struct, frozen=True, kw_only=True, tag="confirmation"):
    """The planner wants to run ``calls`` only once the user approves them."""

    calls: tuple[ToolCall, ...]
    prompt: str = ""


class AwaitExternalTools(msgspec.Struct, frozen=True, kw_only=True, tag="external_tools"):
    """The results of ``calls`` come from outside the runtime; resume with them."""

    calls: tuple[ToolCall, ...]


Await: TypeAlias = AwaitClarification | AwaitConfirmation | AwaitExternalTools
"""Outside input a planner can wait for; the run suspends until ``client.resume``."""


class ToolHappened(msgspec.Struct, frozen=True, tag="happened"):
    """The host's answer to a call in doubt: it did happen, and returned ``result``
    (the model sees it as the call's result). ``by`` says who decided."""

    result: Any = None
    by: str = ""


class ToolRetry(msgspec.Struct, frozen=True, tag="retry"):
    """The host's answer to a call in doubt: it did not happen; call it again (the same
    idempotency key, the next attempt). ``by`` says who decided."""

    by: str = ""


class ToolFailed(msgspec.Struct, frozen=True, tag="failed"):
    """The host's answer to a call in doubt: treat it as failed with ``reason`` (the model
    sees an error result). ``by`` says who decided."""

    reason: str
    by: str = ""


ToolDecision: TypeAlias = ToolHappened | ToolRetry | ToolFailed
"""A host's decision on a tool call in doubt (``client.resume(..., decision)``)."""


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """The outside input that resumes a suspended run [K1].

    ``text`` answers a clarification (and may accompany anything else);
    ``approved`` answers a confirmation; ``tool_results`` maps tool call ids
    to results for external tools; ``decision`` decides a tool call in doubt
    (``client.resume`` puts a bare :data:`ToolDecision` here).
    """

    text: str = ""
    approved: bool | None = None
    tool_results: dict[str, Any] = msgspec.field(default_factory=dict)
    decision: ToolDecision | None = None

    @classmethod
    def approve(cls, text: str = "") -> Answer:
        """Approve a confirmation."""
        return cls(text=text, approved=True)

    @classmethod
    def deny(cls, text: str = "") -> Answer:
        """Decline a confirmation; ``text`` tells the model why."""
        return cls(text=text, approved=False)


class RenderedPrompt(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt as rendered for one run, recorded as ``prompt_rendered`` [D5]."""

    prompt_id: str
    version: str
    text: str


class PlanResult(msgspec.Struct, frozen=True, kw_only=True):
    """A planner's decision: exactly one of ``tool_calls``, ``final`` or ``await_``.

    ``message`` is the assistant message that asked for the tool calls (or the
    question), kept exactly as the model wrote it (thinking, text, tool uses);
    when omitted the runtime builds one from ``tool_calls`` or the question.
    """

    tool_calls: tuple[ToolCall, ...] = ()
    final: Message | None = None
    await_: Await | None = msgspec.field(default=None, name="await")
    notes: tuple[Note, ...] = ()
    message: Message | None = None
    usage: tuple[ModelUsage, ...] = ()

    @classmethod
    def answer(cls, text: str, **kwargs: Any) -> PlanResult:
        """A final answer of plain text."""
        return cls(final=Message(role="assistant", parts=(TextPart(text=text),)), **kwargs)

    @classmethod
    def call(cls, *calls: ToolCall, **kwargs: Any) -> PlanResult:
        """Run these tool calls next."""
        return cls(tool_calls=calls, **kwargs)


class RunContext(msgspec.Struct, frozen=True, kw_only=True):
    """Which run a planner is planning for."""

    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    parent_run_id: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    turn: int = 1
    """1 for the first planner turn of the run, 2 for the next, ..."""


class PlanInput:
    """What a planner's first turn gets: the run, its tools, prompt and transcript.

    :meth:`prepare_messages` loads the transcript once per input and returns
    the same tuple on every call [R3]; if it fails the turn fails.
    """

    def __init__(
        self,
        *,
        run: RunContext,
        tools: tuple[ToolDefinition, ...],
        prompt: RenderedPrompt | None,
        load_messages: Callable[[], Awaitable[tuple[Message, ...]]],
        models: Callable[[str], ModelClient],
        confirm_tools: frozenset[str] = frozenset(),
        deltas: Callable[[ModelStreamEvent], Awaitable[None]] | None = None,
    ) -> None:
        self.run = run
        self.tools = tools
        """Definitions of every tool the agent may call (agents as tools included)."""
        self.prompt = prompt
        """The agent's rendered prompt for this run, if its planner renders one."""
        self.confirm_tools = confirm_tools
        """Names of tools declared with ``confirm=True`` (calls need approval)."""
        self._load = load_messages
        self._models = models
        self._deltas = deltas
        self.live = deltas is not None
        """Whether someone listens to model output as it arrives (the runtime has a stream)."""
        self._messages: asyncio.Future[tuple[Message, ...]] | None = None

    async def prepare_messages(self) -> tuple[Message, ...]:
        """The run's whole transcript, last element the newest delta [R3]; memoised."""
        while True:
            loaded = self._messages
            if loaded is None:
                return await self._load_once()
            if loaded.done():
                return loaded.result()  # the load's error, if it failed
            try:  # another call loads it: wait for that load, not for its caller
                return await asyncio.shield(loaded)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not loaded.cancelled() or (task is not None and task.cancelling()):
                    raise
                # the call that loaded was canceled: load again

    async def _load_once(self) -> tuple[Message, ...]:
        """Load in this call (without a task of its own); calls meanwhile wait for it."""
        loaded = self._messages = asyncio.get_running_loop().create_future()
        try:
            messages = await self._load()
        except asyncio.CancelledError:
            self._messages = None  # not loaded: the next call loads
            loaded.cancel()
            raise
        except BaseException as e:
            loaded.set_exception(e)
            loaded.exception()  # retrieved: every later call raises it
            raise
        loaded.set_result(messages)
        return messages

    async def model_delta(self, event: ModelStreamEvent, /) -> None:
        """Pass one streamed model event on to the run's stream, as a ``model_delta``.

        Not a record: the assistant message is recorded once the turn is done.
        A no-op when nobody listens (:attr:`live` is False) and for ``StreamEnd``.
        """
        if self._deltas is not None:
            await self._deltas(event)

    def model(self, model_id: str) -> ModelClient:
        """The model client registered as ``model_id``.

        Raises:
            ValidationError: no model is registered under that id.
        """
        return self._models(model_id)


class PlanResumeInput(PlanInput):
    """What a later turn gets: also the results of the last tool calls, or the answer."""

    def __init__(
        self,
        *,
        tool_results: tuple[ToolOutcome, ...] = (),
        answer: Answer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tool_results = tool_results
        self.answer = answer
        """The outside input when this is the first turn of a continuation run."""


@runtime_checkable
class Planner(Protocol):
    """An agent's decision maker. Raising fails the run (a TransientError is retried)."""

    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        """Decide the first step of a run."""
        ...

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        """Decide the next step after tool results (or after outside input)."""
        ...


@runtime_checkable
class PromptRenderer(Protocol):
    """A planner that renders a prompt for each run (recorded as ``prompt_rendered``).

    Rendering must be deterministic for a given agent: a retried activity
    writes it again and must write the same bytes [X1].
    """

    def render_prompt(self, agent_id: str, /) -> RenderedPrompt:
        """The prompt this planner uses for runs of ``agent_id``."""
        ...


AwaitKind: TypeAlias = Literal["clarification", "confirmation", "external_tools"]
