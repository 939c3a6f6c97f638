"""Several store calls in one request: ``POST /v1/calls``.

A :class:`~agentledger.service.client.StoreClient` shared by concurrent workers
sends the calls they make at the same moment together, so the HTTP exchange is
paid once for all of them (measured in ``bench/service.py``). The body is a JSON
array of ``[method name, request]`` pairs. Each call's answer is exactly what
``POST /v1/<name>`` would have answered it alone: its result or its typed error
(JSON). A caller that accepts :data:`FRAMES` (StoreClient does) gets each answer
as soon as its call is answered, results as MessagePack, so a quick call never
waits for a slow one beside it; any other caller gets one JSON array of
``[status, answer]`` pairs in the order of the calls.

The token is checked before the body is read; each call is then authorized,
scope-checked and made on its own, exactly as alone, all of them at once, so
concurrent appends still meet in the store's group commit. One call's refusal
never touches the others. Only a refusal of the whole request (no or an unknown
token, the service stopping, a body past the cap or not such an array) answers
the request itself with that typed error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from agentledger.errors import TransientError, ValidationError
from agentledger.service.calls import JSON, answer_call, refusal
from agentledger.service.state import ServiceState
from agentledger.service.wire import FRAMES, MAX_CALLS, METHODS, Method

__all__ = ["answer_calls", "open_calls", "stream_calls", "wants_frames"]


def wants_frames(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for the answers as a stream of frames."""
    return accept is not None and FRAMES in accept


_REQUEST = msgspec.json.Decoder(list[tuple[str, msgspec.Raw]])
_JSON_ANSWER = msgspec.json.Encoder()
_MSGPACK_ANSWER = msgspec.msgpack.Encoder()
_BY_NAME: dict[str, Method[Any, Any]] = {m.name: m for m in METHODS}


async def open_calls(
    state: ServiceState, authorization: str | None, read_body: Callable[[], Awaitable[bytes]]
) -> list[tuple[str, msgspec.Raw]]:
    """The ``[name, request]`` pairs of a ``POST /v1/calls`` whose token is known; the body
    is read only then.

    Raises:
        AgentledgerError: the request is refused whole (stopping, token, body).
    """
    if state.stopping:
        raise TransientError("the service is shutting down", operation="calls")
    state.tokens.authenticate(authorization, "calls")
    return _decode(await read_body())


async def answer_calls(
    state: ServiceState,
    authorization: str | None,
    read_body: Callable[[], Awaitable[bytes]],
) -> tuple[int, bytes, str]:
    """(HTTP status, answer, JSON) of a ``POST /v1/calls`` answered as one JSON array of
    ``[status, answer]`` pairs, in the order of the calls, once every call is answered."""
    try:
        calls = await open_calls(state, authorization, read_body)
    except Exception as e:  # every failure is answered: see refusal
        return refusal("calls", e)
    started = time.perf_counter()
    answers = await asyncio.gather(
        *(_answer(state, authorization, name, body, False) for name, body in calls)
    )
    state.metrics.observe("calls", 200, time.perf_counter() - started)  # each call, and the group
    return 200, _JSON_ANSWER.encode([(s, msgspec.Raw(a)) for s, a in answers]), JSON


async def stream_calls(
    state: ServiceState,
    authorization: str | None,
    calls: list[tuple[str, msgspec.Raw]],
    send: Callable[[bytes], Awaitable[None]],
) -> None:
    """Make every call at once and ``send`` the frames of those answered, as they are
    answered (all those answered at the same moment in one piece), so that no call waits
    for a slower one. A frame is its length (4 bytes, big-endian) then the MessagePack
    array ``[index of the call, status, answer]``; a caller gone before the end leaves the
    calls to finish as they would alone."""
    started = time.perf_counter()
    tasks = [
        asyncio.create_task(_answer(state, authorization, name, body, True)) for name, body in calls
    ]
    index = {task: i for i, task in enumerate(tasks)}
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if pending:  # answers of one commit come in a row: one turn, then one send
                await asyncio.sleep(0)
                also = {t for t in pending if t.done()}
                done, pending = done | also, pending - also
            answered = sorted((index[t], *t.result()) for t in done)
            await send(b"".join(_frame(i, status, answer) for i, status, answer in answered))
    finally:
        if pending:
            await asyncio.wait(pending)
        state.metrics.observe("calls", 200, time.perf_counter() - started)


def _frame(index: int, status: int, answer: bytes) -> bytes:
    """One answer of a stream of frames: its length, then ``[index, status, answer]``."""
    frame = _MSGPACK_ANSWER.encode((index, status, answer))
    return len(frame).to_bytes(4, "big") + frame


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
    """(status, answer) of one call of a request: what ``POST /v1/<name>`` answers it."""
    method = _BY_NAME.get(name)
    if method is None:
        unknown = ValidationError(field="method", expected="the name of a store method",
                                  got=name[:100])  # fmt: skip
        status, answer, _ = refusal(name, unknown)
        return status, answer

    async def read_body() -> bytes:
        return bytes(body)

    status, answer, _ = await answer_call(state, method, authorization, read_body, msgpack=msgpack)
    return status, answer
