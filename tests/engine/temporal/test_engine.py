"""What only the Temporal engine does: termination, payload guards, its boundary checks."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ActivityError, ApplicationError

from agentledger.engine import ChildFailedError
from agentledger.engine.temporal import TemporalEngine, connect, create_worker
from agentledger.engine.temporal.failures import FINISHED_AT
from agentledger.errors import RunNotFoundError, TransientError, ValidationError
from agentledger.runtime import Agent, ModelPlanner, Runtime, tool, user_message
from agentledger.runtime.completion import check_lifecycle
from agentledger.runtime.workflow import run_workflow
from agentledger.storage import RunStatus
from agentledger.storage.payloads import ENGINE_CANCELED
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply, tool_calls
from agentledger.transcript import ToolResultPart
from tests.engine.temporal.harness import temporal_runtime
from tests.engine.temporal.test_scenarios import Gate, chat
from tests.runtime.support import records, valid_transcript


async def _closed(client: Client, workflow_id: str, within: float = 30) -> WorkflowExecutionStatus:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        status = (await client.get_workflow_handle(workflow_id).describe()).status
        if status is not None and status is not WorkflowExecutionStatus.RUNNING:
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{workflow_id} still running after {within}s")
        await asyncio.sleep(0.05)


async def test_a_terminated_parent_ends_its_child_and_both_get_c3(
    temporal_client: Client, store: Store, session: str
) -> None:
    """[O2] [C3] [E2] parent close policy TERMINATE; ensure_run_completion closes both runs."""
    gate = Gate()
    boss = ScriptedModel([tool_calls(("c1", "helper", {"request": "wait"}))])
    helper = ScriptedModel([tool_calls(("h1", "slow", {"seconds": 60}))])

    def setup(runtime: Runtime) -> None:
        runtime.register_model("boss", boss)
        runtime.register_model("helper", helper)
        runtime.register_agent(Agent("helper", ModelPlanner("helper"), tools=[gate.tool()]))
        runtime.register_agent(Agent("boss", ModelPlanner("boss"), agents=["helper"]))

    async with temporal_runtime(temporal_client, store, setup) as runtime:
        handle = await runtime.agent_client("boss").start(session, [user_message("go")])
        child_id = f"{handle.run_id}.c1"
        await asyncio.wait_for(gate.started.wait(), 30)
        await temporal_client.get_workflow_handle(handle.run_id).terminate(reason="operator")
        assert await _closed(temporal_client, child_id) is WorkflowExecutionStatus.TERMINATED
        with pytest.raises(ChildFailedError):
            await handle.wait()
        assert (await store.load_run(child_id)).status is RunStatus.RUNNING
        for run_id in (child_id, handle.run_id):
            info = await runtime.engine.describe(run_id)
            assert info is not None
            assert info.cancel_requested
            assert "terminated" in info.error
            done = await runtime.ensure_run_completion(run_id)
            assert done.repaired
            assert done.status is RunStatus.CANCELED
            assert done.record is not None
            assert ENGINE_CANCELED.encode() in done.record.payload
            assert done.record.timestamp == info.closed_at  # the engine's completion time [E2]
            again = await runtime.ensure_run_completion(run_id)
            assert not again.repaired
            assert again.record == done.record
            meta = await store.load_run(run_id)
            assert meta.cancellation_reason == ""
            check_lifecycle(meta, await records(store, run_id))
            await valid_transcript(store, run_id)


async def test_a_run_input_over_the_payload_limit_is_refused_before_anything(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The run input must fit Temporal's payload limit; nothing is accepted or written."""
    async with temporal_runtime(
        temporal_client, store, chat(ScriptedModel([])), max_payload_bytes=64 * 1024
    ) as runtime:
        big = user_message("x" * 100_000)
        with pytest.raises(ValidationError, match="payload limit"):
            await runtime.agent_client("chat").start(session, [big], run_id=f"big-{session}")
        assert await runtime.engine.describe(f"big-{session}") is None
    with pytest.raises(RunNotFoundError):
        await store.load_run(f"big-{session}")


async def test_a_tool_result_over_the_payload_limit_becomes_an_error_result(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A too-large activity result fails that activity for good, not the workflow task."""

    @tool
    async def dump() -> str:
        """Return far too much."""
        return "y" * 100_000

    model = ScriptedModel([tool_calls(("c1", "dump", {})), reply("Too big.")])
    async with temporal_runtime(
        temporal_client, store, chat(model, tools=[dump]), max_payload_bytes=64 * 1024
    ) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("dump")])
    assert out.status is RunStatus.COMPLETED
    result = (await valid_transcript(store, out.run_id))[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.is_error
    assert "payload limit" in result.content


async def test_unknown_workflows(temporal_client: Client) -> None:
    """describe/cancel of an id Temporal never saw: None and False; result: refused."""
    engine = TemporalEngine(temporal_client, task_queue="unused")
    assert await engine.describe("never-started") is None
    assert await engine.cancel("never-started") is False
    with pytest.raises(ValidationError):
        await engine.result("never-started")


async def test_bind_accepts_only_the_run_loop_once(temporal_client: Client) -> None:
    """Workers run run_workflow; an engine binds to one runtime."""
    engine = TemporalEngine(temporal_client, task_queue="unused")

    async def other(ctx: Any, arg: Any) -> None:
        return None

    with pytest.raises(ValidationError):
        engine.bind(other, {})
    engine.bind(run_workflow, {})
    with pytest.raises(ValidationError):
        engine.bind(run_workflow, {})


async def test_a_client_without_our_converter_is_refused(temporal_address: str) -> None:
    """Payloads must be msgspec JSON on both sides: a plain client cannot drive runs."""
    plain = await Client.connect(temporal_address)
    with pytest.raises(ValidationError, match="data converter"):
        TemporalEngine(plain, task_queue="q")
    assert (await connect(temporal_address)).data_converter.payload_converter_class.__name__ == (
        "MsgspecPayloadConverter"
    )


def test_engine_options_are_checked() -> None:
    """Limits outside what Temporal accepts are refused up front."""
    from agentledger.engine.temporal.options import EngineOptions

    with pytest.raises(ValueError, match="max_payload_bytes"):
        EngineOptions(max_payload_bytes=3 * 1024 * 1024)
    with pytest.raises(ValueError, match="timeouts"):
        EngineOptions(heartbeat_timeout=0)


async def test_a_cancel_right_after_start_still_starts_the_run(
    temporal_client: Client, store: Store, session: str
) -> None:
    """[O1] [O2] [C3] a workflow canceled before its first task still writes run_started."""
    model = ScriptedModel([reply("never asked")])
    async with temporal_runtime(temporal_client, store, chat(model), worker=False) as runtime:
        # No worker polls yet: the cancel request is in the history before the first task.
        handle = await runtime.agent_client("chat").start(session, [user_message("hi")])
        await temporal_client.get_workflow_handle(handle.run_id).cancel()
        engine = runtime.engine
        assert isinstance(engine, TemporalEngine)
        async with create_worker(runtime, temporal_client, engine.task_queue):
            out = await asyncio.wait_for(handle.wait(), 30)
    assert out.status is RunStatus.CANCELED
    assert out.cancellation_reason == ENGINE_CANCELED
    stored = await records(store, handle.run_id)
    assert stored[0].type == "run_started"
    assert stored[-1].type == "run_completed"
    check_lifecycle(await store.load_run(handle.run_id), stored)
    assert model.requests == []


async def test_a_start_without_eager_dispatch_writes_the_same_run(
    temporal_client: Client, store: Store, session: str
) -> None:
    """``eager_start=False``: the first workflow task goes through the task queue; the
    run is the same (every other test starts eagerly, the worker sharing the client)."""
    model = ScriptedModel([tool_calls(("c1", "echo", {"text": "hi"})), reply("said hi")])

    @tool
    async def echo(text: str) -> str:
        """Say it back."""
        return text

    async with temporal_runtime(
        temporal_client, store, chat(model, tools=[echo]), eager_start=False
    ) as runtime:
        assert isinstance(runtime.engine, TemporalEngine)
        assert not runtime.engine.eager_start
        out = await runtime.agent_client("chat").run(session, [user_message("say hi")])
    assert out.status is RunStatus.COMPLETED, out.failure
    assert out.text == "said hi"
    check_lifecycle(await store.load_run(out.run_id), await records(store, out.run_id))
    await valid_transcript(store, out.run_id)


class _Unreachable(ScriptedModel):
    """A model whose every call fails as the network would: retried, then given up."""

    def __init__(self) -> None:
        super().__init__([])

    async def complete(self, request: Any) -> Any:
        raise TransientError("the model is unreachable", operation="complete")

    async def stream(self, request: Any) -> Any:
        raise TransientError("the model is unreachable", operation="stream")
        yield  # an async generator, as the planner streams


async def test_the_record_after_a_failed_activity_has_the_time_its_worker_stamped(
    temporal_client: Client, store: Store, session: str
) -> None:
    """A planner turn that fails for good (its model unreachable through every retry): the
    run's ending, recorded after it, carries the time the worker stamped on the last failure
    (the same in every retry of the workflow task), not the time of the task that handled it."""
    async with temporal_runtime(temporal_client, store, chat(_Unreachable())) as runtime:
        out = await runtime.agent_client("chat").run(session, [user_message("hello?")])
    assert out.status is RunStatus.FAILED

    stamps: list[datetime] = []
    history = await temporal_client.get_workflow_handle(out.run_id).fetch_history()
    for event in history.events:
        if event.HasField("activity_task_failed_event_attributes"):
            failure = event.activity_task_failed_event_attributes.failure
            error = await temporal_client.data_converter.decode_failure(failure)
            cause = error.cause if isinstance(error, ActivityError) else error
            assert isinstance(cause, ApplicationError)
            stamps.append(datetime.fromisoformat(cause.details[0][FINISHED_AT]))
    assert len(stamps) == 1  # the last attempt's failure; the retries are the server's
    stamp = stamps[0].replace(microsecond=stamps[0].microsecond // 1000 * 1000)
    ending = (await records(store, out.run_id))[-1]
    assert ending.type == "run_completed"
    assert ending.timestamp == stamp
