"""One tool call's pieces, apart from how its activity records it: the call's context
(idempotency key, attempt), running the tool, a return value as a result, a call in
doubt, and a result the engine cannot carry back."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec

from agentledger.engine.base import activity_attempt, result_problem
from agentledger.errors import TransientError, ValidationError
from agentledger.runtime.checkpoint import InDoubtToolCall
from agentledger.runtime.planner import ToolOutcome
from agentledger.runtime.registry import Registry
from agentledger.runtime.tools import ToolContext, idempotency_key
from agentledger.runtime.tracing import traced_tool_call
from agentledger.runtime.wire import ToolCallInput, ToolCallOutput
from agentledger.transcript import ToolResultPart

__all__ = ["carried", "in_doubt", "invoke_tool", "result_part", "tool_context"]


def result_part(call_id: str, value: Any) -> ToolResultPart:
    """A tool's return value as the content of call ``call_id``'s result, plain JSON
    (Structs and tuples become dicts and lists; plain JSON is kept as is, JsonNumbers
    included).

    Raises:
        ValidationError, msgspec.EncodeError, TypeError: it is not JSON.
    """
    try:
        return ToolResultPart(tool_use_id=call_id, content=value)
    except ValidationError:
        content = msgspec.to_builtins(value, builtin_types=(Decimal,))
    return ToolResultPart(tool_use_id=call_id, content=content)


def tool_context(arg: ToolCallInput) -> ToolContext:
    """The call's context: its idempotency key and this attempt's number."""
    return ToolContext(
        run_id=arg.run.run_id,
        agent_id=arg.run.agent_id,
        session_id=arg.run.session_id,
        turn_id=arg.turn_id,
        tool_call_id=arg.call.id,
        idempotency_key=arg.key or idempotency_key(arg.run.run_id, arg.call.id),
        attempt=arg.attempts_before + activity_attempt(),
    )


def in_doubt(arg: ToolCallInput) -> ToolCallOutput:
    """A once call started by an earlier attempt, with no outcome: never run it again."""
    call = arg.call
    doubt = InDoubtToolCall(
        tool_name=call.name,
        tool_call_id=call.id,
        key=arg.key or idempotency_key(arg.run.run_id, call.id),
        input=call.input,
        started_at=arg.started_at or arg.run.started_at,
        attempt=arg.attempts_before + 1,
    )
    text = f"in doubt: tool {call.name} was started and its outcome is unknown"
    outcome = ToolOutcome(tool_call_id=call.id, tool_name=call.name, content=text, is_error=True)
    return ToolCallOutput(outcome=outcome, in_doubt=doubt)


def carried(arg: ToolCallInput, outcome: ToolOutcome) -> ToolOutcome:
    """``outcome``, or the error the loop will see if the engine cannot carry it back
    (what is stored must be what the loop gets)."""
    problem = result_problem(ToolCallOutput(outcome=outcome, session_ended=True))
    if not problem:
        return outcome
    call = arg.call
    return ToolOutcome(
        tool_call_id=call.id,
        tool_name=call.name,
        content=f"tool {call.name} failed: {problem}",
        is_error=True,
    )


@traced_tool_call
async def invoke_tool(registry: Registry, arg: ToolCallInput, context: ToolContext) -> ToolOutcome:
    """Run one tool call; anything but a TransientError becomes an error result.

    A once tool's TransientError becomes an error result too: the runtime
    never calls a once tool twice on its own.
    """
    call = arg.call
    resolved = registry.agent(arg.run.agent_id)

    def error(text: str) -> ToolOutcome:
        return ToolOutcome(tool_call_id=call.id, tool_name=call.name, content=text, is_error=True)

    found = resolved.tools.get(call.name)
    if found is None:
        return error(f"unknown tool {call.name!r}; available: {sorted(resolved.tools)}")
    try:
        value = await found.invoke(call.input, context)
    except TransientError as e:
        if arg.effect != "once":
            raise
        return error(
            f"tool {call.name} failed: {e} (a once tool is never called a second time "
            "on its own; its outcome is reported as it is)"
        )
    except ValidationError as e:
        return error(str(e))
    except Exception as e:
        return error(f"{type(e).__name__}: {e}")
    try:
        content = result_part(call.id, value).content
    except (ValidationError, msgspec.EncodeError, TypeError) as e:
        return error(f"tool {call.name} returned a value that is not JSON: {e}")
    return ToolOutcome(tool_call_id=call.id, tool_name=call.name, content=content)
