"""Every store decision, written once: what a command writes, returns or refuses.

Each ``plan_*`` function reads through a :class:`StateReader` (the backend's
open transaction), checks the command against the contract of DESIGN.md
section 3, and returns a :class:`Plan`. It never writes: the backend applies
the plan in the same transaction, so a refused command changes nothing.
"""

from __future__ import annotations

from agentledger.storage.lifecycle.appends import check_batch, plan_append, plan_append_batch
from agentledger.storage.lifecycle.checks import (
    check_listed,
    check_log_end,
    check_sizes,
    completed_runs,
)
from agentledger.storage.lifecycle.endings import (
    plan_cancellation,
    plan_repair_suspension,
    plan_repair_terminal,
    plan_suspension,
    plan_terminal,
)
from agentledger.storage.lifecycle.messages import (
    claim_message,
    list_session_messages,
    load_pending_messages,
    plan_append_turn,
    plan_submit_message,
)
from agentledger.storage.lifecycle.reads import (
    load_run,
    load_run_suspension,
    load_session,
    load_session_status,
    require_run,
    require_session,
)
from agentledger.storage.lifecycle.sessions import (
    plan_create_session,
    plan_end_session,
    plan_purge_session,
)
from agentledger.storage.lifecycle.starts import (
    plan_child_start,
    plan_one_shot_child_start,
    plan_one_shot_start,
    plan_root_start,
)
from agentledger.storage.lifecycle.tool_results import (
    check_tool_result,
    load_tool_result,
    plan_save_tool_result,
)

__all__ = [
    "check_batch",
    "check_listed",
    "check_log_end",
    "check_sizes",
    "check_tool_result",
    "claim_message",
    "completed_runs",
    "list_session_messages",
    "load_pending_messages",
    "load_run",
    "load_run_suspension",
    "load_session",
    "load_session_status",
    "load_tool_result",
    "plan_append",
    "plan_append_batch",
    "plan_append_turn",
    "plan_cancellation",
    "plan_child_start",
    "plan_create_session",
    "plan_end_session",
    "plan_one_shot_child_start",
    "plan_one_shot_start",
    "plan_purge_session",
    "plan_repair_suspension",
    "plan_repair_terminal",
    "plan_root_start",
    "plan_save_tool_result",
    "plan_submit_message",
    "plan_suspension",
    "plan_terminal",
    "require_run",
    "require_session",
]
