"""Several store calls in one request: ``POST /v1/calls``.

A :class:`~agentledger.service.client.StoreClient` shared by concurrent workers
sends the calls they make at the same moment together, so the HTTP exchange is
paid once for all of them (measured in ``bench/service.py``). The body is a JSON
array of ``[method name, request]`` pairs; the answer is an array of
``[status, answer]`` pairs in the same order, each exactly what ``POST
/v1/<name>`` would have answered that call alone: its result (MessagePack if the
caller accepts it, as a byte string) or its typed error (JSON).

The token is checked before the body is read; each call is then authorized,
scope-checked and made on its own, exactly as alone, all of them at once, so concurrent appends
still meet in the store's group commit. One call's refusal never touches the
others. Only a refusal of the whole request (no or an unknown token, the service
stopping, a body past the cap or not such an array) answers the request itself
with that typed error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from agentledger.errors import TransientError, ValidationError
from agentledger.service.calls import JSON, MSGPACK, authorize, refusal, run_call
from agentledger.service.wire import MAX_CALLS, METHODS, Method

if TYPE_CHECKING:
    from agentledger.service.app import ServiceState

__all__ = ["answer_calls"]

_REQUEST = msgspec.json.Decoder(list[tuple[str, msgspec.Raw]])
_JSON_ANSWER = msgspec.json.Encoder()
_MSGPACK_ANSWER = msgspec.msgpack.Encoder()
_BY_NAME: dict[str, Method[Any, Any]] = {m.name: m for m in METHODS}


async def answer_calls(
    state: ServiceState,
    authorization: str | None,
    read_body: Callable[[], Awaitable[bytes]],
    *,
    msgpack: bool = False,
) -> tuple[int, bytes, str]:
    """(HTTP status, answer, its media type) of a ``POST /v1/calls``; see the module."""
    try:
        if state.stopping:
            raise TransientError("the service is shutting down", operation="calls")
        state.tokens.authenticate(authorization, "calls")  # before reading the body
        calls = _decode(await read_body())
    except Exception as e:  # every failure is answered: see refusal
        return refusal("calls", e)
    started = time.perf_counter()
    answers = await asyncio.gather(
        *(_answer(state, authorization, name, body, msgpack) for name, body in calls)
    )
    state.metrics.observe("calls", 200, time.perf_counter() - started)  # each call, and the group
    if msgpack:
        return 200, _MSGPACK_ANSWER.encode(answers), MSGPACK
    return 200, _JSON_ANSWER.encode([(s, msgspec.Raw(a)) for s, a in answers]), JSON


def _decode(body: bytes) -> list[tuple[str, msgspec.Raw]]:
    """The request's ``[name, request]`` pairs, at most :data:`MAX_CALLS` of them."""
    try:
        calls = _REQUEST.decode(body)
    except msgspec.DecodeError as e:
        raise ValidationError(
            field="body",
            expected="a JSON array of [store method name, request] pairs",
            got=str(e),
        ) from None
    if len(calls) > MAX_CALLS:
        raise ValidationError(
            field="body",
            expected=f"at most {MAX_CALLS} calls in one request (this service's limit)",
            got=f"{len(calls)} calls",
        )
    return calls


async def _answer(
    state: ServiceState, authorization: str | None, name: str, body: msgspec.Raw, msgpack: bool
) -> tuple[int, bytes]:
    """(status, answer) of one call of a request, as ``POST /v1/<name>`` answers it."""
    started = time.perf_counter()
    state.metrics.in_flight += 1
    method = _BY_NAME.get(name)
    try:
        if method is None:
            raise ValidationError(
                field="method", expected="the name of a store method", got=name[:100]
            )
        principal = authorize(state, name, authorization, method.roles)
        status, answer, _ = await run_call(state, method, principal, bytes(body), msgpack)
    except Exception as e:  # every failure is answered: see refusal
        status, answer, _ = refusal(name, e)
    finally:
        state.metrics.in_flight -= 1
    if method is not None:
        state.metrics.observe(name, status, time.perf_counter() - started)
    return status, answer
