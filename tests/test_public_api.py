"""The public surface, pinned: what each area exports is a decision, not an accident."""

from __future__ import annotations

import importlib

import pytest

import agentledger

PUBLIC = {
    "agentledger": ["__version__"],
    "agentledger.cli": ["main"],
    "agentledger.transcript": [
        "CacheCheckpointPart", "Citation", "CitationsPart", "DocumentPart", "ImagePart",
        "JsonNumber", "Message", "Part", "Role", "TextPart", "ThinkingPart", "ToolResultPart",
        "ToolUsePart", "build_messages_from_run_log", "decode_message", "decode_messages",
        "encode_message", "encode_messages", "replay_run_log_events", "validate_bedrock",
        "validate_planner_transcript",
    ],
    "agentledger.errors": [
        "AccessDeniedError", "ActivityFailedError", "AgentledgerError", "ArchiveExistsError",
        "ChildFailedError", "ConflictError",
        "ContractError", "CorruptArchiveError", "CorruptRecordError", "NotFoundError",
        "OverloadedError",
        "ProviderError", "RecordConflictError", "RecordOwnerMismatchError",
        "RegistrationClosedError", "RunCancellationConflictError", "RunConflictError",
        "RunLoopError",
        "RunNotActiveError", "RunNotFoundError", "RunSessionMismatchError",
        "RunSuspensionConflictError", "RunTerminalConflictError", "SchemaVersionError",
        "SessionActiveError",
        "SessionBusyError", "SessionConflictError", "SessionEndedError",
        "SessionHasActiveRunsError",
        "SessionKeyErasedError", "SessionNotFoundError", "SessionPurgedError",
        "StoreClosedError", "SuspensionNotFoundError", "TranscriptError", "TransientError",
        "ValidationError",
    ],
    "agentledger.storage": [
        "AppendResult", "BusyPolicy", "Checkpoint", "ChildRunStart", "CopiedFrom", "DerivedCopy",
        "LabelUsage", "MemoryStore",
        "MessageFate", "MessageSubmission", "OneShotChildRunStart",
        "OneShotRunStart", "Page", "PurgeReceipt", "Record", "RecordBuilder", "RepairOutcome",
        "RepairResult",
        "RootRunStart", "RunCancellation", "RunMeta", "RunStart", "RunStatus", "RunSuspension",
        "RunTerminal", "SearchHit", "SearchPage", "Session", "SessionAdmin", "SessionMessage",
        "SessionPage", "SessionStatus",
        "StartOutcome",
        "StartResult", "Store", "TurnAppend", "UsageTotals", "payloads",
    ],
    "agentledger.views": [
        "Branch", "HistorySource", "Price", "PriceTable", "Row", "RunDigest", "RunView",
        "SessionConversation", "Timeline", "Tokens", "Usage", "read_run_start", "read_run_view",
        "session_conversation", "summarize", "timeline", "usage_of",
    ],
    "agentledger.storage.payloads": [
        "CANCELLATION_INTENT", "CHILD_RUN_LINKED", "ENGINE_CANCELED", "LIFECYCLE_TYPES",
        "PROMPT_RENDERED", "RESERVED_REASONS", "RUN_COMPLETED", "RUN_STARTED", "RUN_SUSPENDED",
        "SESSION_ENDED",
        "TRANSCRIPT_APPENDED", "TRANSCRIPT_REFERENCED", "TRANSCRIPT_SEEDED", "TRANSCRIPT_TYPES",
        "TRANSCRIPT_WINDOW", "CancellationIntent", "CancellationNote", "ChildRunLinked",
        "Failure", "RunCompleted", "RunStarted", "RunSuspended", "TranscriptPosition",
        "TranscriptReference", "TranscriptWindow", "WindowReplaces",
    ],
    "agentledger.storage.session_image": [
        "IMAGE_FORMAT", "MESSAGES_IMAGE_FORMAT", "SessionImage", "SessionImageSource",
        "image_byte_total", "image_message_bytes", "read_session_image", "run_digest",
        "session_digest",
    ],
    "agentledger.storage.archive": [
        "ARCHIVE_SUFFIX", "FORMAT_VERSION", "ArchiveCarrier", "ArchiveManifest", "archive_bytes",
        "archive_session", "restore_archive", "restore_archive_bytes", "verify_archive",
    ],
    "agentledger.storage.retention": ["SweepOutcome", "SweepResult", "archive_path", "sweep"],
    "agentledger.storage.conformance": [
        "StoreConformance", "StoreFactory", "StoreOpener", "World", "dump_store",
    ],
    "agentledger.storage.encryption": ["KEYRING_ENV", "SCHEME", "Encryption", "Keyring"],
    "agentledger.interchange": [
        "FORMAT", "FORMAT_VERSION", "ImportOutcome", "SessionFileHeader", "decode_session",
        "encode_session", "export_session", "import_image", "import_session_file",
        "is_session_file", "session_schema",
    ],
    "agentledger.interchange.peers": ["PEERS", "PeerReport", "import_peer", "read_peer"],
    "agentledger.runtime": [
        "Agent", "AgentClient", "AgentTool", "Answer", "AwaitClarification", "AwaitConfirmation",
        "AwaitExternalTools", "Awaiting", "Compaction", "Completion", "HistoryContext",
        "HistoryCut", "HistoryPolicy", "InDoubtToolCall", "LastTurns", "ModelPlanner",
        "ModelUsage", "Note", "Phase", "PlanInput", "PlanResult", "PlanResumeInput", "Planner",
        "PromptUse", "PromptVersion", "QueueSink", "RenderedPrompt", "RunContext", "RunHandle",
        "RunOutput", "Runtime", "StreamSink", "TokenBudget", "Tool", "ToolCall", "ToolContext",
        "ToolDecision", "ToolFailed", "ToolHappened", "ToolOutcome", "ToolRetry", "Toolset",
        "agent_tool", "estimate_tokens", "events", "idempotency_key", "prompt_versions", "tool",
        "user_message",
    ],
    "agentledger.sync": ["SyncStore", "open_postgres", "open_sqlite"],
    "agentledger.providers": [
        "AnthropicClient", "BedrockClient", "ModelClient", "ModelRequest", "ModelResponse",
        "ModelStreamEvent", "OpenAIChatClient", "OpenAIResponsesClient", "StopReason", "StreamEnd",
        "TextDelta", "ThinkingConfig", "ThinkingDelta", "ToolDefinition", "ToolInputDelta",
        "ToolUseStart", "Usage", "client_from_environment",
    ],
    "agentledger.contrib": [],
    "agentledger.contrib.openai_agents": [
        "COMPACTION",
        "FRAMEWORK",
        "MemorySession",
        "items_to_messages",
    ],
    "agentledger.contrib.pydantic_ai": ["PydanticAIHistory", "from_pydantic_ai", "to_pydantic_ai"],
    "agentledger.observability": [
        "CAPTURE_CONTENT_ENV", "RECORD_EVENT", "TraceMiddleware", "TracedModel", "TracedStore",
        "inject_trace_context", "temporal_plugins", "trace_headers",
    ],
    "agentledger.service": [
        "FollowedRecord", "OverloadLimits", "Role", "RuntimeClientHost", "RuntimeHost",
        "StoreClient", "TokenTable", "add_token", "create_app", "serve",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module_name", sorted(PUBLIC))
def test_exports_are_pinned(module_name: str) -> None:
    """Each area exports exactly its documented names, and each of them exists."""
    module = importlib.import_module(module_name)
    assert sorted(module.__all__) == sorted(PUBLIC[module_name])
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_record_type_constants_match_the_design() -> None:
    """[J1] the record type strings are part of the durable format."""
    from agentledger.storage import payloads

    assert (payloads.RUN_STARTED, payloads.RUN_COMPLETED, payloads.RUN_SUSPENDED) == (
        "run_started",
        "run_completed",
        "run_suspended",
    )
    assert payloads.CHILD_RUN_LINKED == "child_run_linked"
    assert payloads.CANCELLATION_INTENT == "runtime.cancellation_intent"
    assert payloads.PROMPT_RENDERED == "prompt_rendered"
    assert payloads.TRANSCRIPT_SEEDED == "transcript_messages_seeded"
    assert payloads.TRANSCRIPT_APPENDED == "transcript_messages_appended"


def test_version_is_the_installed_one() -> None:
    from importlib.metadata import version

    assert agentledger.__version__ == version("agentledger")
