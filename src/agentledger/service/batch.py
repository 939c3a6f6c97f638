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
from collections.abc import Awaitable, Callable

import msgspec

from agentledger.errors import ValidationError
from agentledger.service.auth import Principal
from agentledger.service.calls import Answered, answer_call
from agentledger.service.error_codec import http_status
from agentledger.service.gate import JSON, gate, json_refusal, metered
from agentledger.service.state import ServiceState
from agentledger.service.wire import FRAMES, Role, decode_group, encode_frame, method_named

__all__ = ["answer_calls", "open_calls", "stream_calls", "wants_frames"]

_EVERY_ROLE = frozenset(Role)
"""Who may send a group: any token; each call is then checked against its own roles."""


def wants_frames(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for the answers as a stream of frames."""
    return accept is not None and FRAMES in accept


_JSON_ANSWER = msgspec.json.Encoder()


async def open_calls(
    state: ServiceState, authorization: str | None, read_body: Callable[[], Awaitable[bytes]]
) -> tuple[Principal, list[tuple[str, msgspec.Raw]]]:
    """The caller and the ``[name, request]`` pairs of a ``POST /v1/calls`` through the
    gate; the body is read only then.

    Raises:
        AgentledgerError: the request is refused whole (stopping, token, body).
    """
    principal = gate(state, "calls", authorization, _EVERY_ROLE)
    return principal, decode_group(await read_body())


def _status(answered: Answered) -> int:
    return answered[0]


async def answer_calls(
    state: ServiceState,
    authorization: str | None,
    read_body: Callable[[], Awaitable[bytes]],
) -> Answered:
    """(HTTP status, answer, JSON) of a ``POST /v1/calls`` answered as one JSON array of
    ``[status, answer]`` pairs, in the order of the calls, once every call is answered."""

    async def work() -> Answered:
        principal, calls = await open_calls(state, authorization, read_body)
        answers = await asyncio.gather(
            *(_answer(state, principal, name, body, False) for name, body in calls)
        )
        return 200, _JSON_ANSWER.encode([(s, msgspec.Raw(a)) for s, a in answers]), JSON

    return await metered(state, "calls", work, json_refusal, _status)  # each call, and the group


async def stream_calls(
    state: ServiceState,
    principal: Principal,
    calls: list[tuple[str, msgspec.Raw]],
    send: Callable[[bytes], Awaitable[None]],
) -> None:
    """Make every call at once and ``send`` the frames of those answered, as they are
    answered (all those answered at the same moment in one piece), so that no call waits
    for a slower one (:func:`agentledger.service.wire.encode_frame`); a caller gone before
    the end leaves the calls to finish as they would alone."""
    tasks = [
        asyncio.create_task(_answer(state, principal, name, body, True)) for name, body in calls
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
            await send(b"".join(encode_frame(i, status, answer) for i, status, answer in answered))
    finally:
        if pending:
            await asyncio.wait(pending)


async def _answer(
    state: ServiceState, principal: Principal, name: str, body: msgspec.Raw, msgpack: bool
) -> tuple[int, bytes]:
    """(status, answer) of one call of a request: what ``POST /v1/<name>`` answers it."""
    try:
        method = method_named(name)
    except ValidationError as unknown:  # answered, not counted: names are the caller's
        status, answer, _ = json_refusal(unknown, http_status(unknown))
        return status, answer
    status, answer, _ = await answer_call(state, principal, method, bytes(body), msgpack=msgpack)
    return status, answer
