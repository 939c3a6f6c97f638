"""Engines run the run loop: in-process now, Temporal next.

:mod:`agentledger.engine.base` is the whole boundary (``Engine``,
``WorkflowContext``, ``RetryPolicy``); nothing outside this package knows
which engine runs.
"""

from agentledger.engine.base import (
    ActivityFailed,
    ChildFailed,
    Engine,
    RetryPolicy,
    WorkflowCanceled,
    WorkflowContext,
    WorkflowInfo,
    WorkflowStatus,
)
from agentledger.engine.inprocess import InProcessEngine

__all__ = [
    "ActivityFailed",
    "ChildFailed",
    "Engine",
    "InProcessEngine",
    "RetryPolicy",
    "WorkflowCanceled",
    "WorkflowContext",
    "WorkflowInfo",
    "WorkflowStatus",
]
