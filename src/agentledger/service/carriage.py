"""What JSON cannot carry faithfully is refused, before sending or on arrival [S2].

JSON has no bytes, datetimes or lone surrogates: a ``str`` where a datetime
belongs would arrive as a valid datetime, a ``str`` payload as base64 bytes.
The client checks each call against the msgspec type of its request body
and raises the :class:`~agentledger.errors.ValidationError` the backend would
have raised for the same value (same dotted field), so a call refused in
process is refused through the service too. Enum members travel as their
values and are left to the store to judge. On the service's side,
:func:`invalid_body` turns a body msgspec will not decode into the same kind
of error, for callers that are not a StoreClient.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import Any

import msgspec
from msgspec import inspect as mi

from agentledger.errors import ValidationError

__all__ = ["check_carriable", "field_path", "invalid_body"]


def field_path(prefix: str, path: str) -> str:
    """A msgspec error path (``$.run.labels[...]``) as a store field (``run.labels``)."""
    steps = path.removeprefix("$").replace("[...]", "").lstrip(".")
    return ".".join(p for p in (prefix, steps) if p) or "body"


@cache
def _info(cls: Any) -> mi.Type:
    return mi.type_info(cls)


def _text(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fits(value: Any, kind: mi.Type, path: str) -> str | None:
    """The path of the first value that JSON would not carry as ``kind``, or None."""
    if isinstance(kind, mi.AnyType):
        return None
    if isinstance(kind, mi.UnionType):
        for option in kind.types:
            if _fits(value, option, path) is None:
                return None
        return path
    if isinstance(kind, mi.NoneType):
        return None if value is None else path
    if isinstance(kind, mi.StrType):
        return None if _text(value) else path
    if isinstance(kind, mi.BytesType):
        return None if isinstance(value, bytes) else path
    if isinstance(kind, mi.DateTimeType):
        return None if isinstance(value, datetime) else path
    if isinstance(kind, mi.BoolType):
        return None if isinstance(value, bool) else path
    if isinstance(kind, mi.IntType):
        return None if isinstance(value, int) and not isinstance(value, bool) else path
    if isinstance(kind, mi.EnumType):
        return None if _text(value) else path  # the store judges the value
    if isinstance(kind, mi.ListType | mi.VarTupleType):
        if not isinstance(value, list | tuple):
            return path
        for i, item in enumerate(value):
            if (bad := _fits(item, kind.item_type, f"{path}[{i}]")) is not None:
                return bad
        return None
    if isinstance(kind, mi.DictType):
        if not isinstance(value, dict):
            return path
        for key, item in value.items():
            if _fits(key, kind.key_type, path) or _fits(item, kind.value_type, path):
                return path
        return None
    if isinstance(kind, mi.StructType):
        if not isinstance(value, kind.cls):
            return path
        for f in kind.fields:
            if (bad := _fits(getattr(value, f.name), f.type, f"{path}.{f.name}")) is not None:
                return bad
        return None
    return None  # other types are not used on the wire


Check = Callable[[Any], bool]


def _compile(kind: mi.Type, structs: dict[type, Check]) -> Check:
    """A test of whether JSON carries a value as ``kind``: what :func:`_fits` decides, as
    closures built once per type (the common case, a value that fits, costs no paths)."""
    if isinstance(kind, mi.UnionType):
        options = [_compile(option, structs) for option in kind.types]
        return lambda v: any(fits(v) for fits in options)
    if isinstance(kind, mi.NoneType):
        return lambda v: v is None
    if isinstance(kind, mi.StrType | mi.EnumType):
        return lambda v: isinstance(v, str) and (v.isascii() or _text(v))
    if isinstance(kind, mi.BytesType):
        return lambda v: isinstance(v, bytes)
    if isinstance(kind, mi.DateTimeType):
        return lambda v: isinstance(v, datetime)
    if isinstance(kind, mi.BoolType):
        return lambda v: isinstance(v, bool)
    if isinstance(kind, mi.IntType):
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(kind, mi.ListType | mi.VarTupleType):
        item = _compile(kind.item_type, structs)
        return lambda v: isinstance(v, list | tuple) and all(item(i) for i in v)
    if isinstance(kind, mi.DictType):
        key, value = _compile(kind.key_type, structs), _compile(kind.value_type, structs)
        return lambda v: isinstance(v, dict) and all(key(k) and value(i) for k, i in v.items())
    if isinstance(kind, mi.StructType):
        cls = kind.cls
        if cls not in structs:  # a struct that holds itself refers to this entry
            fields: list[tuple[str, Check]] = []
            structs[cls] = lambda v: (
                isinstance(v, cls) and all(fits(getattr(v, name)) for name, fits in fields)
            )
            fields += [(f.name, _compile(f.type, structs)) for f in kind.fields]
        return structs[cls]
    return lambda v: True  # Any, and the types not used on the wire


@cache
def _check(cls: Any) -> Check:
    return _compile(_info(cls), {})


def check_carriable(value: Any, request_type: Any, prefix: str) -> None:
    """Refuse a call JSON would not carry as ``request_type``.

    Raises:
        ValidationError: ``field`` names the value (``prefix`` first, as the store names it).
    """
    if _check(request_type)(value):
        return
    bad = _fits(value, _info(request_type), "")
    if bad is None:
        return
    got: Any = value
    for step in bad.replace("[", ".[").split("."):
        if not step:
            continue
        got = got[int(step[1:-1])] if step.startswith("[") else getattr(got, step)
    raise ValidationError(field=field_path(prefix, bad), expected="a value of the field's type",
                          got=got)  # fmt: skip


# ------------------------------------------------- refusals by the service

_AT = re.compile(r"^(?P<text>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_EXPECTED = re.compile(r"^Expected `(?P<expected>.+?)`, got `(?P<got>.+?)`$", re.S)
_FIELD = re.compile(r"^Object (?P<what>missing required|contains unknown) field `(?P<name>.+)`$")
_STEP = re.compile(r"\.(?P<name>[^.\[]+)|\[(?P<index>\d+)\]|\[(?P<key>'.*?')\]")
_MISSING = object()


def _value_at(body: bytes, path: str) -> Any:
    """The raw JSON value at a msgspec error path (``.run.labels['k']``), if there is one."""
    try:
        value: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return _MISSING
    for step in _STEP.finditer(path):
        try:
            if step["name"] is not None:
                value = value[step["name"]]
            elif step["index"] is not None:
                value = value[int(step["index"])]
            else:
                value = value[ast.literal_eval(step["key"])]
        except (KeyError, IndexError, TypeError, ValueError, SyntaxError):
            return _MISSING
    return value


def invalid_body(error: msgspec.DecodeError, body: bytes, prefix: str = "") -> ValidationError:
    """A msgspec decoding error as the typed :class:`ValidationError`.

    ``field`` is the dotted path of the offending value and ``got`` the value
    as sent, so a refusal by the wire reads like the store's own.
    """
    found = _AT.match(str(error))
    text, path = (found["text"], found["path"] or "") if found else (str(error), "")
    field = field_path(prefix, path)
    if (named := _FIELD.match(text)) is not None:
        field = field_path(prefix, f"{path}.{named['name']}")
        if named["what"] == "missing required":
            return ValidationError(field=field, expected="a value (required)", got=None)
        return ValidationError(field=field, expected="no such field", got=named["name"])
    got = _value_at(body, path) if path else _MISSING
    typed = _EXPECTED.match(text)
    expected = typed["expected"] if typed else text
    if text.startswith("Invalid enum value"):
        expected = "one of the known values"
    if got is _MISSING:
        got = typed["got"] if typed else None
    return ValidationError(field=field, expected=expected, got=got)
