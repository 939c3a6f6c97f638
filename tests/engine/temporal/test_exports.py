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
