"""The adapters stay optional: agentledger imports without their SDKs, and says how to get them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentledger._extras import install_command

_BLOCK = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {sdk!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Missing())
try:
    import {module}
except ImportError as e:
    print(e)
else:
    print("imported")
"""


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_agentledger_imports_no_framework_sdk() -> None:
    """``import agentledger`` (and its memory and transcript) never loads the adapters' SDKs."""
    out = _run(
        "import sys, agentledger, agentledger.contrib, agentledger.memory, "
        "agentledger.transcript, agentledger.runtime\n"
        "print(sorted(m for m in ('agents', 'pydantic_ai') if m in sys.modules))"
    )
    assert out == "[]"


@pytest.mark.parametrize(
    ("module", "sdk", "extra"),
    [
        ("agentledger.contrib.openai_agents", "agents", "openai-agents"),
        ("agentledger.contrib.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ],
)
def test_a_missing_sdk_gives_the_install_hint(module: str, sdk: str, extra: str) -> None:
    out = _run(_BLOCK.format(sdk=sdk, module=module))
    assert f"needs agentledger's [{extra}] extra" in out
    assert out.endswith(install_command(extra)), out
