"""The public names of agentledger.engine.temporal, pinned."""

from __future__ import annotations

import subprocess
import sys

import agentledger.engine.temporal as temporal


def test_exports() -> None:
    assert sorted(temporal.__all__) == [
        "AgentRunWorkflow",
        "EngineOptions",
        "TemporalEngine",
        "WORKFLOW_NAME",
        "check_client",
        "connect",
        "create_replayer",
        "create_worker",
        "data_converter",
    ]
    for name in temporal.__all__:
        assert getattr(temporal, name) is not None


def test_the_cli_parser_does_not_import_temporalio() -> None:
    """Other ``agentledger`` commands never pay for importing the SDK."""
    code = "import sys, agentledger.cli as c; c.main(['-h']); print('temporalio' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_create_worker_uses_the_runtimes_public_activity_table() -> None:
    """Workers take a runtime's activities through a public seam (issue 14, defect 7):
    ``Runtime.activity_table()`` closes registration and names every activity."""
    from agentledger.engine.temporal.worker import activity_definitions, create_worker
    from agentledger.runtime import Runtime
    from agentledger.runtime.wire import BEGIN_RUN
    from agentledger.storage import MemoryStore

    runtime = Runtime(MemoryStore())
    table = runtime.activity_table()
    assert BEGIN_RUN in table
    assert runtime.activity_table().keys() == table.keys()
    from temporalio.activity import _Definition

    names = [_Definition.must_from_callable(d).name for d in activity_definitions(table)]
    assert sorted(names) == sorted(table)
    used = create_worker.__code__.co_names
    assert "activity_table" in used
    assert not [name for name in used if name.startswith("_") and "activit" in name]
