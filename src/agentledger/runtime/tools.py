"""Tools: typed async functions whose input schema comes from their type hints.

A model produces tool input as JSON; the runtime validates it against the
function's signature with msgspec before calling it, so a tool never sees
malformed input, and a malformed call becomes an error tool result the model
can read and correct, not a crashed run.

Supported parameter types: ``str``, ``int``, ``float``, ``bool``, ``list``,
``dict``, ``Literal``, ``Optional``/``X | None``, msgspec Structs and
TypedDicts (anything msgspec can decode). A parameter annotated
:class:`ToolContext` is not part of the schema: the runtime passes the call's
context there.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, get_args, overload

import msgspec

from agentledger.errors import ValidationError
from agentledger.providers.model import ToolDefinition

__all__ = [
    "EFFECTS",
    "AgentTool",
    "Effect",
    "Tool",
    "ToolContext",
    "Toolset",
    "agent_tool",
    "idempotency_key",
    "tool",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Tool names every provider accepts (OpenAI, Anthropic and Bedrock agree on this)."""


Effect = Literal["retry", "keyed", "once"]
"""What running a tool again does to the world (see :class:`Tool`)."""

EFFECTS: tuple[Effect, ...] = get_args(Effect)
"""Every effect class, the default first."""

_KEY_PREFIX = "al1-"


def idempotency_key(run_id: str, tool_call_id: str) -> str:
    """The idempotency key of tool call ``tool_call_id`` first scheduled by run ``run_id``.

    Format: ``"al1-"`` followed by the 64 lowercase hex digits of the SHA-256 of
    ``run_id``, one NUL byte, and ``tool_call_id`` (both UTF-8): 68 characters,
    safe in any HTTP header. Only these two ids go in, so every attempt, engine
    and worker (and a continuation that runs the call again) derives the same key.
    """
    digest = hashlib.sha256(
        run_id.encode("utf-8") + b"\x00" + tool_call_id.encode("utf-8")
    ).hexdigest()
    return _KEY_PREFIX + digest


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """Who is calling a tool: the run, session, turn and call id; the call's key and attempt.

    ``idempotency_key`` is the same in every attempt of the call (see
    :func:`idempotency_key`); ``attempt`` counts the attempts, 1 first.
    """

    run_id: str
    agent_id: str
    session_id: str
    turn_id: str
    tool_call_id: str
    idempotency_key: str = ""
    attempt: int = 1


def _check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError(
            field=f"{what}.name", expected="1-64 characters of A-Z a-z 0-9 _ -", got=name
        )
    return name


def _schema_of(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of a Struct, as one top-level object schema (nested types in $defs)."""
    schema = msgspec.json.schema(struct)
    defs = dict(schema.get("$defs", {}))
    top = dict(defs.pop(struct.__name__))
    top.pop("title", None)
    if defs:
        top["$defs"] = defs
    return top


class Tool:
    """One callable tool: a name, a description, an input schema and an async function.

    Build it with :func:`tool`. Calling :meth:`invoke` validates the model's
    input first; invalid input raises :class:`ValidationError` naming the
    problem (the runtime turns it into an error tool result).
    """

    def __init__(
        self,
        fn: Callable[..., Awaitable[Any]],
        *,
        name: str | None = None,
        description: str | None = None,
        confirm: bool = False,
        effect: Effect = "retry",
    ) -> None:
        if effect not in EFFECTS:
            raise ValidationError(
                field="tool.effect", expected=f"one of {', '.join(EFFECTS)}", got=effect
            )
        if not inspect.iscoroutinefunction(fn):
            raise ValidationError(
                field="tool",
                expected="an async function (async def)",
                got=getattr(fn, "__name__", fn),
            )
        self.fn = fn
        self.name = _check_name(name or fn.__name__, "tool")
        self.description = description if description is not None else inspect.getdoc(fn) or ""
        self.confirm = confirm
        """Whether a call needs the user's confirmation first (ModelPlanner then suspends)."""
        self.effect: Effect = effect
        """``retry``: safe to run again (the default); ``keyed``: it hands the call's
        idempotency key to the system it changes, so running again is safe; ``once``:
        never run again when its outcome is unknown (the run asks the host instead)."""
        self._context_param = ""
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        hints = typing.get_type_hints(fn)
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ValidationError(
                    field=f"tool {self.name}.{param.name}",
                    expected="named parameters only",
                    got=str(param.kind),
                )
            hint = hints.get(param.name, Any)
            if hint is ToolContext or ToolContext in typing.get_args(hint):
                self._context_param = param.name
                continue
            if param.default is inspect.Parameter.empty:
                fields.append((param.name, hint))
            else:
                fields.append((param.name, hint, param.default))
        self.input_type: type[msgspec.Struct] = msgspec.defstruct(
            f"{self.name}_input", fields, kw_only=True, forbid_unknown_fields=True
        )
        self.input_schema = _schema_of(self.input_type)

    def definition(self) -> ToolDefinition:
        """What a model is told about this tool."""
        return ToolDefinition(
            name=self.name, description=self.description, input_schema=self.input_schema
        )

    def validate(self, input: dict[str, Any]) -> msgspec.Struct:
        """Decode the model's input into the typed arguments, strictly.

        Raises:
            ValidationError: with msgspec's description of what is wrong and where.
        """
        try:
            return msgspec.convert(input, self.input_type, strict=True)
        except msgspec.ValidationError as e:
            raise ValidationError(
                field=f"{self.name}.input",
                expected=f"input matching the {self.name} schema",
                got=input,
                message=f"invalid input for tool {self.name}: {e}",
            ) from e

    async def invoke(self, input: dict[str, Any], context: ToolContext) -> Any:
        """Validate ``input`` and await the function with it."""
        args = self.validate(input)
        kwargs = {name: getattr(args, name) for name in args.__struct_fields__}
        if self._context_param:
            kwargs[self._context_param] = context
        return await self.fn(**kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"


@overload
def tool(fn: Callable[..., Awaitable[Any]], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    confirm: bool = False,
    effect: Effect = "retry",
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]: ...


def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    confirm: bool = False,
    effect: Effect = "retry",
) -> Tool | Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Make an async function a :class:`Tool` (``@tool`` or ``@tool(name=..., effect="once")``).

    The description defaults to the docstring, the name to the function's name.

    Raises:
        ValidationError: ``effect`` is not ``"retry"``, ``"keyed"`` or ``"once"``.
    """
    if effect not in EFFECTS:
        raise ValidationError(
            field="tool.effect", expected=f"one of {', '.join(EFFECTS)}", got=effect
        )

    def wrap(f: Callable[..., Awaitable[Any]]) -> Tool:
        return Tool(f, name=name, description=description, confirm=confirm, effect=effect)

    return wrap(fn) if fn is not None else wrap


class AgentTool(msgspec.Struct, frozen=True, kw_only=True):
    """Another registered agent offered as a tool; a call runs it as a child run [L2]/[L4].

    The model sends ``{"request": "..."}``; the child's final answer is the result.
    """

    agent_id: str
    name: str = ""
    description: str = ""

    @property
    def tool_name(self) -> str:
        """The name the model calls (the agent id unless renamed)."""
        return self.name or self.agent_id

    def definition(self, fallback_description: str = "") -> ToolDefinition:
        """What a model is told about this agent tool."""
        return ToolDefinition(
            name=self.tool_name,
            description=self.description or fallback_description or f"Ask agent {self.agent_id}",
            input_schema={
                "type": "object",
                "properties": {"request": {"type": "string"}},
                "required": ["request"],
                "additionalProperties": False,
            },
        )


def agent_tool(agent_id: str, *, name: str = "", description: str = "") -> AgentTool:
    """Offer the registered agent ``agent_id`` as a tool of another agent."""
    tool_spec = AgentTool(agent_id=agent_id, name=name, description=description)
    _check_name(tool_spec.tool_name, "agent_tool")
    return tool_spec


class Toolset:
    """A named group of tools, registered once and shared by agents.

    Tool names must be unique within the set.
    """

    def __init__(self, name: str, tools: Iterable[Tool]) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError(field="toolset.name", expected="a non-empty string", got=name)
        self.name = name
        self.tools: tuple[Tool, ...] = tuple(tools)
        seen: set[str] = set()
        for item in self.tools:
            if not isinstance(item, Tool):
                raise ValidationError(field=f"toolset {name}", expected="Tool objects", got=item)
            if item.name in seen:
                raise ValidationError(
                    field=f"toolset {name}", expected="unique tool names", got=item.name
                )
            seen.add(item.name)

    def __repr__(self) -> str:
        return f"<Toolset {self.name} {[t.name for t in self.tools]}>"
