"""Helpers shared by the runtime tests: record sequences, transcript checks, small agents."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentledger.errors import TransientError
from agentledger.providers.model import ModelRequest, ModelResponse
from agentledger.runtime import Agent, ModelPlanner, QueueSink, Runtime
from agentledger.storage import MemoryStore, Record, RunStatus
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.sqlite import SQLiteStore
from agentledger.transcript import Message, validate_planner_transcript

AnyStore = MemoryStore | SQLiteStore

ONE_CALL = [  # a tool loop with one tool call, as record types
    "run_started",
    "prompt_rendered",
    "transcript_messages_appended",
    "phase:prompted",
    "phase:planning",
    "model_usage",
    "transcript_messages_appended",
    "phase:executing_tools",
    "tool_call_scheduled",
    "tool_result_received",
    "transcript_messages_appended",
    "phase:synthesizing",
    "model_usage",
    "transcript_messages_appended",
    "run_completed",
]
"""The record types of a run whose model calls one tool once, then answers."""


def now_ms() -> datetime:
    """Now, in UTC, with millisecond precision (what stores accept)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


async def records(store: Any, run_id: str) -> list[Record]:
    """Every record of a run, in commit order."""
    out: list[Record] = []
    cursor = ""
    while True:
        page = await store.list_run_records(run_id, cursor=cursor, limit=1000)
        out.extend(page.records)
        if not page.next_cursor:
            return out
        cursor = page.next_cursor


async def types(store: Any, run_id: str) -> list[str]:
    """The record types of a run, in order; phase changes show as ``phase:<name>``."""
    out = []
    for record in await records(store, run_id):
        if record.type == "run_phase_changed":
            out.append("phase:" + record.payload.decode().split('"phase":"')[1].split('"')[0])
        else:
            out.append(record.type)
    return out


async def valid_transcript(store: Any, run_id: str) -> list[Message]:
    """The run's transcript rebuilt from its log, checked with the planner validator [R2] [T5].

    Only a suspended run may end with tool uses that wait for their results.
    """
    messages = await build_messages_from_run_log(store, run_id)
    suspended = (await store.load_run(run_id)).status is RunStatus.SUSPENDED
    validate_planner_transcript(messages, allow_pending=suspended)
    return messages


def chat_runtime(
    store: Any, model: Any, *, tools: Any = (), stream: QueueSink | None = None, **agent: Any
) -> Runtime:
    """A runtime with one ModelPlanner agent ``chat`` over ``model``."""
    runtime = Runtime(store, stream=stream if stream is not None else QueueSink())
    runtime.register_model("m", model)
    runtime.register_agent(
        Agent("chat", ModelPlanner("m", system="Be brief."), tools=tools, **agent)
    )
    return runtime


async def provider_inputs_match_replay(store: Any, model: Any, runs: list[str]) -> None:
    """Each model call's messages (without the system prompt) are the replay of its run's
    log through the record before the call's usage (after the turn's window, if any)."""
    calls = iter(model.requests)
    for run_id in runs:
        logged = await records(store, run_id)
        for n, record in enumerate(logged):
            if record.type != "model_usage" or ":history:" in record.event_key:
                continue
            through = logged[n - 1].id
            request = next(calls)
            sent = [m for m in request.messages if m.role != "system"]
            replayed = await build_messages_from_run_log(store, run_id, through=through)
            assert replayed == sent, (run_id, record.event_key)
    assert next(calls, None) is None


class FailsOnce:
    """A model whose call ``fail_at`` raises a TransientError once (then answers)."""

    def __init__(self, inner: Any, fail_at: int) -> None:
        self.inner = inner
        self.fail_at = fail_at
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == self.fail_at:
            raise TransientError("connection reset")
        return await self.inner.complete(request)

    async def stream(self, request: ModelRequest) -> Any:
        self.calls += 1
        if self.calls == self.fail_at:
            raise TransientError("connection reset")
        async for event in self.inner.stream(request):
            yield event
