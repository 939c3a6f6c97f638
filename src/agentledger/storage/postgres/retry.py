"""Which PostgreSQL failures are retried inside an operation, and what the rest become.

* A deadlock, serialization failure or lock timeout, a unique violation
  (another writer created the row first) and a stale write are retried from
  a fresh transaction a bounded number of times: the decision is rerun on
  the new state, so the outcome is what a serial order would give. When the
  attempts run out the caller gets :class:`~agentledger.errors.TransientError`.
* A connection that fails before the operation sent any write (a pooled
  connection the server closed while idle, or one killed while the operation
  was still reading or waiting for a lock) is replaced and the operation
  retried: nothing it did can have committed.
* A connection that fails after the writes (or the commit) were sent is
  :class:`~agentledger.errors.TransientError` at once. The transaction may or
  may not have committed, and the caller's retry of the same command settles
  it: an exact retry returns the ids the first attempt was given.
"""

from __future__ import annotations

import asyncio
import random

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import PoolClosed, PoolTimeout, TooManyRequests

from agentledger.errors import TransientError
from agentledger.storage.postgres.apply import StaleWrite

__all__ = ["CONFLICTS", "MAX_ATTEMPTS", "backoff", "is_retryable", "transient"]

MAX_ATTEMPTS = 12
"""Attempts per operation before a retryable failure surfaces as TransientError."""

CONFLICTS: tuple[type[BaseException], ...] = (
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
    pg_errors.LockNotAvailable,
    pg_errors.UniqueViolation,
    pg_errors.DivisionByZero,  # an UPDATE that matched no row: a StaleWrite raised in SQL
    StaleWrite,
)
"""Concurrency failures: the transaction was rolled back and may simply be run again."""


def is_retryable(error: BaseException) -> bool:
    """Whether ``error`` is a concurrency failure worth another attempt."""
    return isinstance(error, CONFLICTS)


async def backoff(attempt: int) -> None:
    """Sleep a jittered, growing delay before attempt ``attempt + 1`` (1 ms .. ~100 ms)."""
    await asyncio.sleep(random.uniform(0.5, 1.0) * min(0.1, 0.001 * 2**attempt))


def transient(error: BaseException, operation: str) -> TransientError:
    """The TransientError a caller sees for a database or pool failure."""
    if isinstance(error, PoolClosed):
        return TransientError("the store is closed", operation=operation)
    if isinstance(error, PoolTimeout | TooManyRequests):
        return TransientError(f"no database connection available: {error}", operation=operation)
    if is_retryable(error):
        return TransientError(
            f"gave up after {MAX_ATTEMPTS} attempts on concurrent writers: {error}",
            operation=operation,
        )
    if isinstance(error, psycopg.Error):
        return TransientError(f"{type(error).__name__}: {error}".strip(), operation=operation)
    return TransientError(str(error), operation=operation)
