"""Tools: JSON schemas from type hints and strict validation of model-produced input."""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import msgspec
import pytest

from agentledger.errors import ValidationError
from agentledger.runtime import Tool, ToolContext, Toolset, agent_tool, tool


class Point(msgspec.Struct):
    lat: float
    lon: float


class Window(TypedDict):
    start: str
    end: str


@tool(description="Find places.")
async def find(
    query: str,
    limit: int = 5,
    near: Point | None = None,
    kind: Literal["cafe", "bar"] = "cafe",
    tags: list[str] | None = None,
    window: Window | None = None,
    open_now: bool = False,
    radius: float = 1.0,
    extra: dict[str, Any] | None = None,
    ctx: ToolContext | None = None,
) -> list[str]:
    return [query] * limit


def test_the_schema_comes_from_the_type_hints() -> None:
    """Required and optional parameters, Literal, Optional, Structs and TypedDicts."""
    schema = find.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    props = schema["properties"]
    assert props["query"] == {"type": "string"}
    assert props["limit"] == {"type": "integer", "default": 5}
    assert sorted(props["kind"]["enum"]) == ["bar", "cafe"]
    assert props["open_now"]["type"] == "boolean"
    assert props["radius"]["type"] == "number"
    assert {"$ref": "#/$defs/Point"} in props["near"]["anyOf"]
    assert set(schema["$defs"]) == {"Point", "Window"}
    assert schema["additionalProperties"] is False
    assert find.definition().description == "Find places."
    assert find.definition().name == "find"


def test_context_parameters_are_not_in_the_schema() -> None:
    """A ToolContext parameter is injected by the runtime, not asked of the model."""

    @tool
    async def whoami(ctx: ToolContext) -> str:
        """Who calls."""
        return ctx.run_id

    assert whoami.input_schema["properties"] == {}
    assert whoami.description == "Who calls."


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({}, "missing required field `query`"),
        ({"query": 1}, "Expected `str`, got `int` - at `$.query`"),
        ({"query": "x", "kind": "pub"}, "Invalid enum value 'pub' - at `$.kind`"),
        ({"query": "x", "near": {"lat": "n"}}, "at `$.near.lat`"),
        ({"query": "x", "surprise": True}, "unknown field `surprise`"),
    ],
)
def test_invalid_input_names_the_problem(payload: dict[str, Any], problem: str) -> None:
    """Model input that breaks the schema is a ValidationError saying what and where."""
    with pytest.raises(ValidationError) as refused:
        find.validate(payload)
    assert problem in str(refused.value)
    assert "invalid input for tool find" in str(refused.value)


async def test_valid_input_is_decoded_into_typed_arguments() -> None:
    """Nested Structs arrive as Structs; defaults fill the rest."""
    args = find.validate({"query": "tea", "near": {"lat": 1.5, "lon": 2}})
    assert args.near == Point(lat=1.5, lon=2.0)  # type: ignore[attr-defined]
    context = ToolContext(run_id="r", agent_id="a", session_id="s", turn_id="t", tool_call_id="c")
    assert await find.invoke({"query": "tea", "limit": 2}, context) == ["tea", "tea"]


def test_bad_tool_definitions_are_refused() -> None:
    """Sync functions, *args, provider-invalid names and duplicate names are refused."""

    def sync() -> None: ...

    async def spread(*args: int) -> None: ...

    with pytest.raises(ValidationError):
        Tool(sync)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Tool(spread)
    with pytest.raises(ValidationError):
        tool(name="has.dot")(find.fn)
    with pytest.raises(ValidationError):
        Toolset("dupes", [find, find])
    with pytest.raises(ValidationError):
        agent_tool("bad name")
