"""The runtime's public surface, pinned: what each area exports is a decision."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "agentledger.runtime": [
        "Agent", "AgentClient", "AgentTool", "Answer", "AwaitClarification", "AwaitConfirmation",
        "AwaitExternalTools", "Awaiting", "Compaction", "Completion", "HistoryContext",
        "HistoryCut", "HistoryPolicy", "InDoubtToolCall", "LastTurns", "ModelPlanner",
        "ModelUsage", "Note",
        "Phase", "PlanInput", "PlanResult", "PlanResumeInput", "Planner", "PromptUse",
        "PromptVersion", "QueueSink",
        "RenderedPrompt", "RunContext", "RunHandle", "RunOutput", "Runtime", "StreamSink",
        "TokenBudget", "Tool", "ToolCall", "ToolContext", "ToolDecision", "ToolFailed",
        "ToolHappened", "ToolOutcome", "ToolRetry", "Toolset", "agent_tool",
        "estimate_tokens", "events", "idempotency_key", "prompt_versions", "tool",
        "user_message",
    ],
    "agentledger.engine": [
        "ActivityFailedError", "ChildFailedError", "Engine", "InProcessEngine", "RetryPolicy",
        "WorkflowContext", "WorkflowInfo", "WorkflowStatus",
    ],
    "agentledger.memory": [
        "AssistantMessage", "ErasedEvent", "EventSource", "FrameworkItem", "InMemoryMemory",
        "MemoryEvent", "PlannerNote", "ProductMemory",
        "SQLiteMemory", "Snapshot", "Thinking", "ToolCall", "ToolResult", "UserMessage",
    ],
    "agentledger.runtime.events": [
        "CancellationRequested", "ChildRunLinked", "MessageSteered", "MessageSubmitted",
        "MessagesAppended",
        "ModelDelta",
        "ModelUsageReported", "PhaseChanged", "PlannerNoted", "PromptRendered", "RunCompleted",
        "RunEvent", "RunStarted", "RunSuspended", "ToolCallAnswered", "ToolCallScheduled",
        "ToolCallStarted", "ToolResultReceived",
        "delta_event", "event_from_record",
    ],
    "agentledger.runtime.records": [
        "MODEL_USAGE", "PLANNER_NOTE", "PROMPT_RENDERED", "RUN_PHASE_CHANGED",
        "TOOL_CALL_ANSWERED", "TOOL_CALL_SCHEDULED", "TOOL_CALL_STARTED",
        "TOOL_RESULT_RECEIVED", "TRANSCRIPT_APPENDED",
        "TRANSCRIPT_REFERENCED", "TRANSCRIPT_SEEDED",
        "NotePayload", "Phase", "PhasePayload", "PromptPayload", "RecordSpec",
        "ToolAnsweredPayload", "ToolResultPayload", "ToolScheduledPayload", "ToolStartedPayload",
        "UsagePayload", "decode_json", "encode_json",
        # the event-key grammar, owned here: build a key, parse one back, decode a payload
        "EventKey", "KeyKind", "decode_payload", "history_key", "history_usage_key",
        "messages_key", "note_key", "parse_event_key", "phase_key", "prompt_key", "step_turn",
        "tool_key", "turn_step", "usage_key", "window_key",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_exports_are_pinned(module_name: str) -> None:
    """Each area exports exactly these names, and each exists."""
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(PUBLIC[module_name])
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_testing_exports_include_the_scripted_model() -> None:
    """agentledger.testing ships ScriptedModel (other doubles may join it later)."""
    import agentledger.testing as testing

    assert {"ScriptedModel", "ScriptExhaustedError", "reply", "tool_calls"} <= set(testing.__all__)


def test_record_type_names_are_the_durable_format() -> None:
    """The ordinary record types the runtime writes are part of the stored format."""
    from agentledger.runtime import records

    assert (
        records.RUN_PHASE_CHANGED,
        records.TOOL_CALL_SCHEDULED,
        records.TOOL_RESULT_RECEIVED,
        records.PLANNER_NOTE,
        records.MODEL_USAGE,
    ) == (
        "run_phase_changed",
        "tool_call_scheduled",
        "tool_result_received",
        "planner_note",
        "model_usage",
    )
