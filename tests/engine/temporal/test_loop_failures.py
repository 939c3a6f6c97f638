"""A bug in the run loop fails the run on Temporal as it does in process (issue 14, defect 6)."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from agentledger.storage import RunStatus, payloads
from agentledger.storage.protocol import Store
from agentledger.testing import ScriptedModel, reply
from tests.engine.temporal.harness import temporal_runtime
from tests.engine.temporal.test_scenarios import chat
from tests.runtime.support import records
from tests.runtime.test_failures import run_with_a_loop_bug


async def test_a_bug_in_the_run_loop_fails_the_run(
    temporal_client: Client, store: Store, session: str
) -> None:
    """The workflow does not retry its task forever: the run ends failed with the very
    run_completed failure the in-process engine records, and the workflow completes."""
    async with temporal_runtime(temporal_client, store, chat(ScriptedModel([reply("x")]))) as rt:
        out = await asyncio.wait_for(run_with_a_loop_bug(rt, session), 30)
    assert out.status is RunStatus.FAILED
    assert out.failure is not None
    assert (out.failure.kind, out.failure.code) == ("workflow_error", "IndexError")
    assert out.failure.message == "IndexError: tuple index out of range"
    done = payloads.RunCompleted.decode((await records(store, out.run_id))[-1].payload)
    assert done.failure == out.failure
    described = await temporal_client.get_workflow_handle(out.run_id).describe()
    assert described.status.name == "COMPLETED"
