"""One store call over HTTP: authenticate, authorize, decode, scope-check, call, answer [S1].

:func:`answer_call` is the whole of a ``POST /v1/<name>`` call, free of any
web framework: it takes the ``Authorization`` header and a way to read the
body, and gives the HTTP status and the JSON answer (the result or the typed
error). :mod:`.store_routes` runs it straight from the ASGI scope, and
:mod:`.batch` runs it for each call of a ``POST /v1/calls``.

A caller that sends ``Accept: application/msgpack`` (StoreClient does) gets a
result as MessagePack instead of JSON: bytes travel as they are, not as base64,
and a page of records decodes in about half the time. Requests and typed
errors are JSON either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from agentledger.errors import AccessDeniedError, AgentledgerError, TransientError, ValidationError
from agentledger.service.auth import Principal
from agentledger.service.carriage import invalid_body
from agentledger.service.error_codec import encode_error, http_status
from agentledger.service.json_times import encode_json
from agentledger.service.scope import check_scope, check_stateless
from agentledger.service.state import ServiceState
from agentledger.service.wire import Method, RecordBatch, Role, check_entries
from agentledger.storage.types import Record

__all__ = [
    "JSON",
    "MSGPACK",
    "answer_call",
    "authorize",
    "body_too_large",
    "refusal",
    "wants_msgpack",
]

_log = logging.getLogger("agentledger.service")
_MSGPACK_ENCODER = msgspec.msgpack.Encoder()
JSON = "application/json"
MSGPACK = "application/msgpack"


def authorize(
    state: ServiceState, operation: str, authorization: str | None, roles: frozenset[Role]
) -> Principal:
    """The caller's principal, if the service is serving and its role may call ``operation``.

    Raises:
        TransientError: the service is shutting down.
        AccessDeniedError: (401) no or an unknown token; (403) a role that may not call it.
    """
    if state.stopping:
        raise TransientError("the service is shutting down", operation=operation)
    principal = state.tokens.authenticate(authorization, operation)
    if principal.role not in roles:
        raise AccessDeniedError(
            operation=operation,
            status=403,
            reason=f"a {principal.role} token may not call {operation}",
        )
    return principal


def body_too_large(operation: str, cap: int) -> ValidationError:
    """The refusal of a request body past the service's cap."""
    return ValidationError(
        field="body",
        expected=f"a {operation} request of at most {cap} bytes (this service's limit)",
        got="a larger body",
    )


def wants_msgpack(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for MessagePack results."""
    return accept is not None and MSGPACK in accept


async def answer_call(
    state: ServiceState,
    method: Method[Any, Any],
    authorization: str | None,
    read_body: Callable[[], Awaitable[bytes]],
    *,
    msgpack: bool = False,
) -> tuple[int, bytes, str]:
    """(HTTP status, answer, its media type) of one store call; the body is read once the
    caller is authenticated and authorized, and every error is answered as its typed
    error (JSON). ``msgpack``: the result as MessagePack."""
    started = time.perf_counter()
    state.metrics.in_flight += 1
    try:
        principal = authorize(state, method.name, authorization, method.roles)
        answered = await _run_call(state, method, principal, await read_body(), msgpack)
    except Exception as e:  # every failure is answered: see refusal
        answered = refusal(method.name, e)
    finally:
        state.metrics.in_flight -= 1
    state.metrics.observe(method.name, answered[0], time.perf_counter() - started)
    return answered


async def _run_call(
    state: ServiceState, method: Method[Any, Any], principal: Principal, body: bytes, msgpack: bool
) -> tuple[int, bytes, str]:
    """The answer of one authorized call of ``method`` with request ``body``: decoded,
    narrowed and scope-checked for a label-scoped principal, then made.

    Raises:
        AgentledgerError: the call is refused (its typed error is the answer).
    """
    check_entries(body, method.name)
    try:
        call = method.decoder.decode(body)
    except msgspec.DecodeError as e:
        raise invalid_body(e, body, method.prefix) from None
    if principal.labels and method.narrow is not None:
        call = method.narrow(call, principal.labels)
    if principal.labels:  # what a scoped token may touch, and hear of the rest [S4]
        check_stateless(method.plan, call, state.limits)
        await check_scope(state.store, principal, method.name, method.subjects(call))
    result = await method.call(state.store, call)
    if method.writes and state.notifier.waiting:
        state.notifier.notify(_logs_written(call))
    if msgpack:
        return 200, _MSGPACK_ENCODER.encode(result), MSGPACK
    return 200, encode_json(result), JSON


def refusal(operation: str, error: Exception) -> tuple[int, bytes, str]:
    """(HTTP status, typed error, JSON) answering a call that raised ``error``: its own
    typed error, or for anything else a logged internal error the caller may retry."""
    if isinstance(error, AgentledgerError):
        return http_status(error), encode_error(error), JSON
    _log.error("store service: %s failed", operation, exc_info=error)
    failure = TransientError("internal error in the store service", operation=operation)
    return 500, encode_error(failure), JSON


def _logs_written(call: object) -> list[str] | None:
    """The follow keys of the logs an ordinary append changes; None (every log) for any
    other write, whose effects on other runs' logs the store decides."""
    if isinstance(call, Record):
        return [f"run:{call.run_id}", f"session:{call.session_id}"]
    if isinstance(call, RecordBatch):
        runs = {(r.run_id, r.session_id) for r in call.records}
        return [key for run, session in runs for key in (f"run:{run}", f"session:{session}")]
    return None
