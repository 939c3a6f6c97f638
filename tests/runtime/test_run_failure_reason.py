"""Why a run failed, read back from its last record on every backend (the service's client
included): what the CLI and the inspector show is what the run's ending recorded."""

from __future__ import annotations

from typing import Any

from agentledger.runtime import user_message
from agentledger.storage import RunStatus
from agentledger.storage.run_failure import RunFailure, load_run_failure, load_run_failures
from agentledger.testing import ScriptedModel, reply
from tests.runtime.support import chat_runtime


async def test_a_failed_runs_reason_is_read_from_its_ending(
    every_store: Any, every_session: str
) -> None:
    runtime = chat_runtime(every_store, ScriptedModel([reply("one")]))
    chat = runtime.agent_client("chat")
    ok = await chat.run(every_session, [user_message("first")])
    failed = await chat.run(every_session, [user_message("second")])
    await runtime.close()
    assert (ok.status, failed.status) == (RunStatus.COMPLETED, RunStatus.FAILED)
    assert failed.failure is not None
    expected = RunFailure(kind=failed.failure.kind, message=failed.failure.message)
    assert str(expected).startswith("planner_error: ScriptExhaustedError: ")
    metas = await every_store.list_runs_by_session(every_session)
    by_id = {m.run_id: m for m in metas}
    assert await load_run_failure(every_store, by_id[failed.run_id]) == expected
    assert await load_run_failure(every_store, by_id[ok.run_id]) is None
    assert await load_run_failures(every_store, metas) == {failed.run_id: expected}
