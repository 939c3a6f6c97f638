"""Errors across Temporal: what an activity failure carries, and the error rebuilt from it.

An activity that raises becomes a Temporal ``ApplicationError``: its ``type``
is the error's class name, ``non_retryable`` is set for everything but a
:class:`~agentledger.errors.TransientError` (a
:class:`~agentledger.errors.ContractError` is permanent), and its one detail
is a small JSON object (:func:`error_details`) with the attempt number and
the error's own fields. On the other side :func:`rebuild_error` makes the
same :mod:`agentledger.errors` class with the same fields again, so the run
loop and ``RunHandle.wait`` see the error they would see in process (a
``SessionNotFoundError`` stays one). Pure code: the workflow sandbox imports
this module.
"""

from __future__ import annotations

from typing import Any

from agentledger import errors
from agentledger.errors import AgentledgerError, TransientError

__all__ = ["ACTIVITY_FAILED", "FINISHED_AT", "error_details", "rebuild_error"]

ACTIVITY_FAILED = "ActivityFailed"
"""The ``ApplicationError`` type of a workflow that ended on a failed activity."""

FINISHED_AT = "finished_at"
"""The detail an activity worker adds: when the failed attempt ended (ISO 8601), what the
run's clock advances to (see :mod:`.workflows`)."""

_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """A field value as plain JSON (sequences of scalars kept, anything else as its repr)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, _SCALARS) for v in value):
        return list(value)
    return repr(value)


def error_details(error: BaseException, *, attempt: int) -> dict[str, Any]:
    """The detail an activity failure carries: class, message, attempt, fields."""
    state: dict[str, Any] = {}
    if isinstance(error, AgentledgerError):
        state = {k: _plain(v) for k, v in vars(error).items() if not k.startswith("_")}
    return {
        "error_type": type(error).__name__,
        "message": str(error),
        "retryable": isinstance(error, TransientError),
        "attempts": attempt,
        "state": state,
    }


def rebuild_error(details: Any) -> AgentledgerError | None:
    """The :mod:`agentledger.errors` error described by ``details``; None if it is not one."""
    if not isinstance(details, dict):
        return None
    name, state = details.get("error_type"), details.get("state")
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, AgentledgerError)):
        return None
    if not isinstance(state, dict):
        state = {}
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", details.get("message", "")))
    error.__dict__.update(state)
    if "message" not in state:
        error.message = str(details.get("message", ""))
    return error
