"""ModelPlanner: the standard tool loop over any registered ``ModelClient``.

Each turn sends the system prompt and the run's whole transcript (with the
agent's tool definitions) to the model. Tool uses in the answer become tool
calls; an answer without tool uses is final. A call to a tool marked
``confirm=True`` suspends the run for the user's approval instead.
"""

from __future__ import annotations

from typing import Any

from agentledger.providers.model import ModelRequest, ModelResponse, StreamEnd
from agentledger.runtime.planner import (
    AwaitConfirmation,
    ModelUsage,
    PlanInput,
    PlanResult,
    PlanResumeInput,
    RenderedPrompt,
    ToolCall,
)
from agentledger.transcript import Message, TextPart, ToolUsePart

__all__ = ["ModelPlanner"]


class ModelPlanner:
    """Plans with a model: tool_use parts -> tool calls, text -> final answer.

    Args:
        model_id: the id given to ``runtime.register_model``.
        system: the system prompt ("" for none).
        prompt_id: the recorded id of the prompt (default ``"<agent>.system"``).
        prompt_version: the recorded version of the prompt [D5].
        model: the provider's model name (default: ``model_id``).
        max_tokens: the answer's token budget.
        temperature: sampling temperature (None: the provider's default).
        confirm: tool names whose calls need the user's approval first (in
            addition to tools declared with ``confirm=True``).
        stream: call ``ModelClient.stream``, pass each delta to the run's stream
            (``model_delta`` events) and take the final response; None (the
            default) streams when the runtime has a stream sink.
        options: provider-only request settings.
    """

    def __init__(
        self,
        model_id: str,
        *,
        system: str = "",
        prompt_id: str = "",
        prompt_version: str = "1",
        model: str = "",
        max_tokens: int = 1024,
        temperature: float | None = None,
        confirm: tuple[str, ...] = (),
        stream: bool | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.model_id = model_id
        self.system = system
        self.prompt_id = prompt_id
        self.prompt_version = prompt_version
        self.model = model or model_id
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.confirm = frozenset(confirm)
        self.stream = stream
        self.options = dict(options or {})

    def render_prompt(self, agent_id: str, /) -> RenderedPrompt:
        """The system prompt, with its id and version, recorded once per run."""
        return RenderedPrompt(
            prompt_id=self.prompt_id or f"{agent_id}.system",
            version=self.prompt_version,
            text=self.system,
        )

    async def plan_start(self, input: PlanInput, /) -> PlanResult:
        """Ask the model for the first step."""
        return await self._turn(input)

    async def plan_resume(self, input: PlanResumeInput, /) -> PlanResult:
        """Ask the model again, now that the transcript holds the tool results."""
        return await self._turn(input)

    async def _turn(self, input: PlanInput) -> PlanResult:
        messages = await input.prepare_messages()
        system = input.prompt.text if input.prompt is not None else self.system
        head = (Message(role="system", parts=(TextPart(text=system),)),) if system else ()
        request = ModelRequest(
            model=self.model,
            messages=(*head, *messages),
            tools=input.tools,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            options=self.options,
        )
        client = input.model(self.model_id)
        stream = input.live if self.stream is None else self.stream
        response = await (
            self._streamed(client, request, input) if stream else client.complete(request)
        )
        usage = (
            ModelUsage(
                model=response.model or self.model,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                cache_read_tokens=response.usage.cache_read_tokens,
                cache_write_tokens=response.usage.cache_write_tokens,
            ),
        )
        message = response.message
        calls = tuple(
            ToolCall(id=p.id, name=p.name, input=p.input)
            for p in message.parts
            if isinstance(p, ToolUsePart)
        )
        if not calls:
            return PlanResult(final=message, usage=usage)
        confirm = self.confirm | input.confirm_tools
        if any(c.name in confirm for c in calls):
            text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
            awaiting = AwaitConfirmation(calls=calls, prompt=text)
            return PlanResult(await_=awaiting, message=message, usage=usage)
        return PlanResult(tool_calls=calls, message=message, usage=usage)

    @staticmethod
    async def _streamed(client: Any, request: ModelRequest, input: PlanInput) -> ModelResponse:
        async for event in client.stream(request):
            if isinstance(event, StreamEnd):
                response: ModelResponse = event.response
                return response
            await input.model_delta(event)
        raise ValueError("the model stream ended without a StreamEnd event")
