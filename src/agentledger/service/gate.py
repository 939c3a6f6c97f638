"""The way into the service and out of it, the same for every room.

:func:`gate` is the one entry check of a request: the service is not stopping,
the caller's token is known, and its role may do what it asks. A principal
already admitted (a call of a ``POST /v1/calls``, a frame of a connection) is
checked again with :func:`admit`.

:func:`metered` is the one way out: it runs a request's work, turns a typed
error into its answer (an internal failure into a logged ``TransientError``,
HTTP 500, the caller may retry), and counts the answer and its latency in the
service's metrics. The answer's shape is the caller's: JSON bytes for a store
call (:func:`json_refusal`), a page for the inspector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agentledger.errors import AccessDeniedError, AgentledgerError, TransientError
from agentledger.service.auth import Principal
from agentledger.service.error_codec import encode_error, http_status
from agentledger.service.state import ServiceState
from agentledger.service.wire import Role

__all__ = [
    "JSON",
    "AnsweredByConnection",
    "Authenticate",
    "admit",
    "check_role",
    "gate",
    "json_refusal",
    "metered",
]

_log = logging.getLogger("agentledger.service")
A = TypeVar("A")

JSON = "application/json"

Authenticate = Callable[[str | None, str], Principal]
"""The principal of an ``Authorization`` value, for an operation (whose name an
``AccessDeniedError`` carries)."""


class AnsweredByConnection(Exception):
    """Raised by a request's work when its connection already answered it (a body too slow
    to arrive: 408) and closed: :func:`metered` counts the request with that status."""

    def __init__(self, status: int, error: AgentledgerError) -> None:
        super().__init__(status, error)
        self.status = status
        self.error = error


def check_role(
    principal: Principal, operation: str, roles: frozenset[Role], purpose: str | None = None
) -> Principal:
    """``principal``, if its role is one of ``roles``.

    Raises:
        AccessDeniedError: (403) it is not; the reason says the role may not ``purpose``
            (by default: call ``operation``).
    """
    if principal.role not in roles:
        raise AccessDeniedError(
            operation=operation,
            status=403,
            reason=f"a {principal.role} token may not {purpose or f'call {operation}'}",
        )
    return principal


def admit(
    state: ServiceState,
    principal: Principal,
    operation: str,
    roles: frozenset[Role],
    purpose: str | None = None,
) -> Principal:
    """``principal``, if the service is serving and its role may do ``operation``.

    Raises:
        TransientError: the service is shutting down.
        AccessDeniedError: (403) a role that may not.
    """
    if state.stopping:
        raise TransientError("the service is shutting down", operation=operation)
    return check_role(principal, operation, roles, purpose)


def gate(
    state: ServiceState,
    operation: str,
    authorization: str | None,
    roles: frozenset[Role],
    *,
    purpose: str | None = None,
    authenticate: Authenticate | None = None,
) -> Principal:
    """The caller's principal, if the service is serving, the ``Authorization`` value
    names a known token, and its role may do ``operation``. ``authenticate``: who finds
    the principal of a token (by default the service's tokens, looked up anew).

    Raises:
        TransientError: the service is shutting down.
        AccessDeniedError: (401) no or an unknown token; (403) a role that may not
            (the reason says it may not ``purpose``, by default: call ``operation``).
    """
    if state.stopping:
        raise TransientError("the service is shutting down", operation=operation)
    if authenticate is None:
        principal = state.tokens.authenticate(authorization, operation)
    else:
        principal = authenticate(authorization, operation)
    return check_role(principal, operation, roles, purpose)


def json_refusal(error: AgentledgerError, status: int) -> tuple[int, bytes, str]:
    """(HTTP status, the typed error as JSON, its media type)."""
    return status, encode_error(error), JSON


async def metered(
    state: ServiceState,
    operation: str,
    work: Callable[[], Awaitable[A]],
    refuse: Callable[[AgentledgerError, int], A],
    status: Callable[[A], int],
    *,
    room: str = "store service",
) -> A:
    """``work()``'s answer, or ``refuse(error, HTTP status)``'s for the error it raised
    (anything but a typed error is logged and answered as an internal ``TransientError``,
    500); either way counted in the service's metrics under ``operation`` with
    ``status(answer)`` and its latency."""
    started = time.perf_counter()
    state.metrics.in_flight += 1
    try:
        answer = await work()
    except AgentledgerError as e:
        answer = refuse(e, http_status(e))
    except AnsweredByConnection as e:  # the client saw that answer: count it (nothing is sent)
        answer = refuse(e.error, e.status)
    except Exception as e:
        _log.error("%s: %s failed", room, operation, exc_info=e)
        answer = refuse(TransientError(f"internal error in the {room}", operation=operation), 500)
    finally:
        state.metrics.in_flight -= 1
    state.metrics.observe(operation, status(answer), time.perf_counter() - started)
    return answer
