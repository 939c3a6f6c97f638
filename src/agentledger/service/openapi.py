"""The OpenAPI 3.1 document of the store service, built from the method table [S6].

Schemas come from msgspec itself (:func:`msgspec.json.schema_components`),
so the document describes exactly what the service decodes.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import inspect

from agentledger import __version__
from agentledger.service.error_codec import ErrorBody
from agentledger.service.json_times import TIME_FORMAT
from agentledger.service.wire import CALLS_ROUTE, FRAMES, MAX_CALLS, METHODS

__all__ = ["openapi_document"]

_REF = "#/components/schemas/{name}"


def _json(schema: Any, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _parameter(name: str, where: str, *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": {"type": "string"}}


def _calls_path(refusals: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/calls``: several store calls in one request, each answered on its own."""
    pair = {"type": "array", "prefixItems": [{"type": "string"}, {}], "minItems": 2,
            "maxItems": 2}  # fmt: skip
    return {
        "post": {
            "operationId": "calls",
            "summary": f"Up to {MAX_CALLS} store calls in one request, as "
            "[method name, request] pairs; each is authorized and made as if alone",
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"type": "array", "items": pair, "maxItems": MAX_CALLS}
                    }
                },
            },
            "responses": {
                "200": _json(
                    {"type": "array", "items": {**pair, "prefixItems": [{"type": "integer"}, {}]}},
                    "[status, answer] per call, in order: what POST /v1/<method> answers it "
                    f"(with Accept: {FRAMES}, each answer as a frame as soon as it is answered: "
                    "a 4-byte big-endian length, then MessagePack [index, status, answer])",
                ),
                **refusals,
            },
        }
    }


def _time_fields(info: Any, seen: set[type], out: dict[str, set[str]]) -> None:
    """The fields typed as a time, by struct name, of the types ``info`` reaches."""
    if isinstance(info, inspect.StructType):
        if info.cls in seen:
            return
        seen.add(info.cls)
        for field in info.fields:
            kinds = field.type.types if isinstance(field.type, inspect.UnionType) else (field.type,)
            if any(isinstance(kind, inspect.DateTimeType) for kind in kinds):
                out.setdefault(info.cls.__name__, set()).add(field.encode_name)
            _time_fields(field.type, seen, out)
        return
    for name in ("types", "item_types"):
        for inner in getattr(info, name, ()):
            _time_fields(inner, seen, out)
    for name in ("item_type", "key_type", "value_type"):
        if hasattr(info, name):
            _time_fields(getattr(info, name), seen, out)


def _describe_times(types: list[Any], components: dict[str, Any]) -> None:
    """Mark each time field a date-time written as answers write it (msgspec says only
    "string")."""
    fields: dict[str, set[str]] = {}
    seen: set[type] = set()
    for info in inspect.multi_type_info(types):
        _time_fields(info, seen, fields)
    for struct, names in fields.items():
        properties = components.get(struct, {}).get("properties", {})
        for name in names & properties.keys():
            prop = properties[name]
            for branch in prop.get("anyOf", [prop]):
                if branch.get("type") == "string":
                    branch["format"] = "date-time"
            prop["description"] = f"in answers: {TIME_FORMAT}"


def openapi_document() -> dict[str, Any]:
    """Every route of the service: one POST per store method, follow streams, probes."""
    types: list[Any] = [ErrorBody]
    for method in METHODS:
        types += [method.request, method.response]
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    error = schemas[0]
    refusals = {
        "401": _json(error, "no bearer token, or an unknown one"),
        "403": _json(error, "the token's role or label scope does not allow this call"),
        "4XX": _json(error, "the store refused the call; the body names the typed error"),
        "5XX": _json(error, "transient trouble: the call may be retried as it was"),
    }
    paths: dict[str, Any] = {}
    for i, method in enumerate(METHODS):
        request, response = schemas[1 + 2 * i], schemas[2 + 2 * i]
        paths[method.route] = {
            "post": {
                "operationId": method.name,
                "summary": f"Store.{method.name}; roles: {', '.join(sorted(method.roles))}",
                "security": [{"bearer": []}],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": request}},
                },
                "responses": {"200": _json(response, "the call's result"), **refusals},
            }
        }
    paths[CALLS_ROUTE] = _calls_path(refusals)
    for scope in ("runs", "sessions"):
        name = scope.removesuffix("s")
        paths[f"/v1/{scope}/{{{name}_id}}/records"] = {
            "get": {
                "operationId": f"follow_{name}_records",
                "summary": f"Follow a {name}'s records as server-sent events, from a cursor",
                "security": [{"bearer": []}],
                "parameters": [
                    _parameter(f"{name}_id", "path", required=True),
                    _parameter("after", "query"),
                    _parameter("Last-Event-ID", "header"),
                ],
                "responses": {
                    "200": {
                        "description": "one `record` event per record; its id resumes after it",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **refusals,
                },
            }
        }
    for probe, text in (("/healthz", "the process is up"), ("/readyz", "the store answers")):
        paths[probe] = {"get": {"operationId": probe[1:], "summary": text,
                                "responses": {"200": {"description": text}}}}  # fmt: skip
    paths["/metrics"] = {
        "get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics: requests and latency per method",
            "responses": {"200": {"description": "text exposition format"}},
        }
    }
    _describe_times(types, components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentledger store service",
            "version": __version__,
            "description": f"Times in JSON answers and follow events: {TIME_FORMAT}.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
