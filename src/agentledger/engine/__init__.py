"""Engines run the run loop: in-process now, Temporal next.

:mod:`agentledger.engine.base` is the whole boundary (``Engine``,
``WorkflowContext``, ``RetryPolicy``); nothing outside this package knows
which engine runs.
"""

from agentledger.engine.base import (
    ActivityFailedError,
    ChildFailedError,
    Engine,
    RetryPolicy,
    WorkflowContext,
    WorkflowInfo,
    WorkflowStatus,
)
from agentledger.engine.inprocess import InProcessEngine

__all__ = [
    "ActivityFailedError",
    "ChildFailedError",
    "Engine",
    "InProcessEngine",
    "RetryPolicy",
    "WorkflowContext",
    "WorkflowInfo",
    "WorkflowStatus",
]
