"""Request options shared by every adapter's ``encode(messages, tools, options)``.

``options`` is a plain mapping so that `ModelRequest.options` (provider-only
settings) and the request's own fields travel together. Unknown keys are an
error: a misspelt option that silently did nothing would be worse.

Keys every adapter takes:

* ``model`` (str, required), ``max_tokens`` (int, default 1024),
  ``temperature`` (float or None), ``tool_choice`` (``auto``/``any``/``none``),
  ``thinking`` (a `ThinkingConfig`, ``{"budget_tokens": n}`` or None);
* ``drop_foreign_reasoning`` (bool): leave out reasoning this provider did not
  produce (and Gemini ``thought_signature``\\ s) instead of refusing it;
* ``drop_cache_checkpoints`` (bool): leave out cache checkpoints the request
  cannot carry instead of refusing them;
* ``extra`` (dict): more top-level payload fields, sent as given; a key the
  adapter sets itself is an error.

Each adapter documents its own additional keys.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentledger.errors import ValidationError
from agentledger.providers.model import ModelRequest, ThinkingConfig

__all__ = ["EncodeOptions", "merge_extra", "options_for", "parse_options", "sdk_kwargs"]

_COMMON = frozenset(
    (
        "model",
        "max_tokens",
        "temperature",
        "tool_choice",
        "thinking",
        "drop_foreign_reasoning",
        "drop_cache_checkpoints",
        "extra",
    )
)


@dataclass(frozen=True)
class EncodeOptions:
    """The parsed common options, plus the adapter's own keys in ``provider``."""

    model: str
    max_tokens: int = 1024
    temperature: float | None = None
    tool_choice: Literal["auto", "any", "none"] = "auto"
    thinking: ThinkingConfig | None = None
    drop_foreign_reasoning: bool = False
    drop_cache_checkpoints: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    provider: Mapping[str, Any] = field(default_factory=dict)


def _bad(key: str, expected: str, got: object) -> ValidationError:
    return ValidationError(field=f"options.{key}", expected=expected, got=got)


def _thinking(value: object) -> ThinkingConfig | None:
    if value is None or isinstance(value, ThinkingConfig):
        return value
    if isinstance(value, Mapping) and set(value) <= {"budget_tokens"}:
        budget = value.get("budget_tokens", 1024)
        if type(budget) is int and budget > 0:
            return ThinkingConfig(budget_tokens=budget)
    raise _bad("thinking", "a ThinkingConfig, {'budget_tokens': int > 0} or None", value)


def parse_options(
    options: Mapping[str, Any] | None, provider_keys: Collection[str] = ()
) -> EncodeOptions:
    """Check ``options`` and split them into common and provider keys.

    Raises:
        ValidationError: an unknown key, a missing ``model`` or a value of the wrong type.
    """
    given = dict(options or {})
    unknown = sorted(set(given) - _COMMON - set(provider_keys))
    if unknown:
        raise _bad(unknown[0], "a known option", given[unknown[0]])
    model = given.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "a non-empty str", model)
    max_tokens = given.get("max_tokens", 1024)
    if type(max_tokens) is not int or max_tokens <= 0:
        raise _bad("max_tokens", "an int > 0", max_tokens)
    temperature = given.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise _bad("temperature", "a number or None", temperature)
    tool_choice = given.get("tool_choice", "auto")
    if tool_choice not in ("auto", "any", "none"):
        raise _bad("tool_choice", "one of auto, any, none", tool_choice)
    flags = {}
    for key in ("drop_foreign_reasoning", "drop_cache_checkpoints"):
        flags[key] = given.get(key, False)
        if type(flags[key]) is not bool:
            raise _bad(key, "a bool", flags[key])
    extra = given.get("extra", {})
    if not isinstance(extra, Mapping) or not all(isinstance(k, str) for k in extra):
        raise _bad("extra", "a mapping of str keys", extra)
    return EncodeOptions(
        model=model,
        max_tokens=max_tokens,
        temperature=None if temperature is None else float(temperature),
        tool_choice=tool_choice,
        thinking=_thinking(given.get("thinking")),
        drop_foreign_reasoning=flags["drop_foreign_reasoning"],
        drop_cache_checkpoints=flags["drop_cache_checkpoints"],
        extra=dict(extra),
        provider={key: given[key] for key in provider_keys if key in given},
    )


def options_for(request: ModelRequest) -> dict[str, Any]:
    """The ``options`` mapping ``encode`` takes: the fields of ``request`` plus its ``options``.

    Raises:
        ValidationError: ``request.options`` repeats a key that is a request field.
    """
    fields = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "tool_choice": request.tool_choice,
        "thinking": request.thinking,
    }
    clash = sorted(set(fields) & set(request.options))
    if clash:
        raise _bad(clash[0], f"set as ModelRequest.{clash[0]}, not in options", clash[0])
    return {**fields, **request.options}


def merge_extra(payload: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Add ``extra`` fields to ``payload``.

    Raises:
        ValidationError: ``extra`` names a field the adapter already set.
    """
    clash = sorted(set(payload) & set(extra))
    if clash:
        raise _bad("extra", f"fields the adapter does not set (it sets {clash[0]!r})", clash[0])
    payload.update(extra)
    return payload


def sdk_kwargs(payload: Mapping[str, Any], request: ModelRequest) -> dict[str, Any]:
    """Keyword arguments for an OpenAI or Anthropic SDK call: ``extra`` fields go in ``extra_body``.

    The SDKs' ``create`` methods take only the fields they know as keywords.
    """
    extra = request.options.get("extra") or {}
    kwargs = {key: value for key, value in payload.items() if key not in extra}
    if extra:
        kwargs["extra_body"] = dict(extra)
    return kwargs
