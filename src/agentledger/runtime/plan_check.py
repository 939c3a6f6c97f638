"""Whether a planner's plan can be carried out on the transcript it was made for."""

from __future__ import annotations

from agentledger.errors import ValidationError
from agentledger.runtime.planner import AwaitClarification, PlanResult
from agentledger.runtime.transcript_cache import KnownTranscript
from agentledger.transcript import Message, TextPart, ToolUsePart, validate_planner_transcript

__all__ = ["check_plan"]


def check_plan(
    plan: object, transcript: tuple[Message, ...], *, known: KnownTranscript | None = None
) -> str:
    """Why ``plan`` cannot be carried out on ``transcript`` ("" when it can).

    A plan is exactly one of tool calls, a final message or an await; its
    assistant message must hold exactly its calls, with ids new to the
    transcript, and the transcript with that message must stay valid [T5].
    ``known``, the cache's view of ``transcript``, checks only the new message.
    """
    if not isinstance(plan, PlanResult):
        return f"the planner returned {type(plan).__name__}, not a PlanResult"
    chosen = [bool(plan.tool_calls), plan.final is not None, plan.await_ is not None]
    if sum(chosen) != 1:
        return "a plan needs exactly one of tool_calls, final or await_"
    if plan.final is not None:
        message = plan.final
        if message.role != "assistant" or not message.parts:
            return "the final message must be a non-empty assistant message"
        if any(isinstance(p, ToolUsePart) for p in message.parts):
            return "the final message cannot hold tool uses"
    elif isinstance(plan.await_, AwaitClarification):
        if not plan.await_.question:
            return "a clarification needs a question"
        message = plan.message or Message(
            role="assistant", parts=(TextPart(text=plan.await_.question),)
        )
        if any(isinstance(p, ToolUsePart) for p in message.parts):
            return "a clarification message cannot hold tool uses"
    else:
        calls = plan.tool_calls or (plan.await_.calls if plan.await_ is not None else ())
        if not calls:
            return "an await for tool calls needs at least one call"
        message = plan.message or Message(role="assistant", parts=tuple(c.part() for c in calls))
        uses = [p for p in message.parts if isinstance(p, ToolUsePart)]
        if uses != [c.part() for c in calls]:
            return "the assistant message must hold exactly the plan's tool calls, in order"
    if message.role != "assistant":
        return "the plan's message must be an assistant message"
    try:
        if known is not None and known.messages is transcript:
            known.validate_next(message, allow_pending=True)
        else:
            validate_planner_transcript([*transcript, message], allow_pending=True)
    except ValidationError as e:
        return f"the plan would make the transcript invalid: {e}"
    return ""
