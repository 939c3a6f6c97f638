"""One store call: admitted, decoded, scope-checked, made, answered [S1].

:func:`answer_call` answers one call of a principal already through the gate
(:func:`agentledger.service.gate.gate`): a call of a ``POST /v1/calls``
(:mod:`.batch`), and whatever else carries frames ``[call id, method, body]``.
:func:`answer_request` is the whole of a ``POST /v1/<name>``, free of any web
framework: it takes the ``Authorization`` header and a way to read the body
(read only once the caller is through the gate). Both give the HTTP status and
the answer (the result, or the typed error as JSON), and are counted in the
service's metrics (:func:`agentledger.service.gate.metered`).

A caller that sends ``Accept: application/msgpack`` (StoreClient does) gets a
result as MessagePack instead of JSON: bytes travel as they are, not as base64,
and a page of records decodes in about half the time. Requests and typed
errors are JSON either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from agentledger.errors import ValidationError
from agentledger.service.auth import Principal
from agentledger.service.carriage import invalid_body
from agentledger.service.gate import JSON, Authenticate, admit, gate, json_refusal, metered
from agentledger.service.json_times import encode_json
from agentledger.service.scope import check_scope, check_stateless
from agentledger.service.state import ServiceState
from agentledger.service.wire import Method, RecordBatch, check_entries
from agentledger.storage.types import Record

__all__ = [
    "JSON",
    "MSGPACK",
    "answer_body",
    "answer_call",
    "answer_request",
    "body_too_large",
    "wants_msgpack",
]

_MSGPACK_ENCODER = msgspec.msgpack.Encoder()
MSGPACK = "application/msgpack"
Answered = tuple[int, bytes, str]
"""(HTTP status, answer, its media type)."""


def _status(answered: Answered) -> int:
    return answered[0]


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
    principal: Principal,
    method: Method[Any, Any],
    body: bytes,
    *,
    msgpack: bool = False,
) -> Answered:
    """The answer of ``principal``'s call of ``method`` with request ``body``: refused if
    the service is stopping or the principal's role may not call it, else made; every
    error is answered as its typed error (JSON). ``msgpack``: the result as MessagePack."""

    async def work() -> Answered:
        admit(state, principal, method.name, method.roles)
        return await _run_call(state, method, principal, body, msgpack)

    return await metered(state, method.name, work, json_refusal, _status)


async def answer_request(
    state: ServiceState,
    method: Method[Any, Any],
    authorization: str | None,
    read_body: Callable[[], Awaitable[bytes]],
    *,
    msgpack: bool = False,
    authenticate: Authenticate | None = None,
) -> Answered:
    """The answer of a ``POST /v1/<name>`` of ``method``: the body is read once the caller
    is through the gate; then as :func:`answer_call`. ``authenticate``: who finds the
    principal of ``authorization`` (by default the service's tokens, looked up anew)."""

    async def work() -> Answered:
        principal = gate(state, method.name, authorization, method.roles,
                         authenticate=authenticate)  # fmt: skip
        return await _run_call(state, method, principal, await read_body(), msgpack)

    return await metered(state, method.name, work, json_refusal, _status)


async def answer_body(
    state: ServiceState,
    method: Method[Any, Any],
    authorization: str | None,
    body: bytes,
    cap: int,
    authenticate: Authenticate,
) -> Answered:
    """:func:`answer_request` of a call whose request ``body`` is in hand (a message of a
    client's socket), the result as MessagePack: the same gate, then the body refused past
    ``cap`` bytes, then the same call, with one layer less per call."""

    async def work() -> Answered:
        principal = gate(state, method.name, authorization, method.roles,
                         authenticate=authenticate)  # fmt: skip
        if len(body) > cap:
            raise body_too_large(method.name, cap)
        return await _run_call(state, method, principal, body, True)

    return await metered(state, method.name, work, json_refusal, _status)


async def _run_call(
    state: ServiceState, method: Method[Any, Any], principal: Principal, body: bytes, msgpack: bool
) -> Answered:
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


def _logs_written(call: object) -> list[str] | None:
    """The follow keys of the logs an ordinary append changes; None (every log) for any
    other write, whose effects on other runs' logs the store decides."""
    if isinstance(call, Record):
        return [f"run:{call.run_id}", f"session:{call.session_id}"]
    if isinstance(call, RecordBatch):
        runs = {(r.run_id, r.session_id) for r in call.records}
        return [key for run, session in runs for key in (f"run:{run}", f"session:{session}")]
    return None
