"""An optional extra missing from a Python import: the error names the extra and the line
that installs it from this copy's checkout or wheel (the CLI's line), never
``pip install 'agentledger[X]'``, which would fetch an unrelated project from the index."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentledger._extras import install_command

_BLOCK = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Missing())
try:
{code}
except ImportError as e:
    print(type(e).__name__, e.name, "|", e)
else:
    print("no error")
"""

CASES = {
    "temporal": ("temporalio", "from agentledger.engine.temporal import TemporalEngine"),
    "temporal connect": ("temporalio", "from agentledger.engine.temporal import connect"),
    "service": ("aiohttp", "from agentledger.service import StoreClient"),
    "postgres store": ("psycopg", "import agentledger.storage.postgres"),
    "postgres memory": ("psycopg", "import agentledger.memory.postgres"),
    "encryption": ("cryptography", "from agentledger.storage.encryption import Encryption"),
    "conformance": ("hypothesis", "import agentledger.storage.conformance"),
    "openai-agents": ("agents", "import agentledger.contrib.openai_agents"),
    "pydantic-ai": ("pydantic_ai", "import agentledger.contrib.pydantic_ai"),
    "openai": ("openai", "from agentledger.providers import OpenAIChatClient\nOpenAIChatClient()"),
    "anthropic": (
        "anthropic", "from agentledger.providers import AnthropicClient\nAnthropicClient()"
    ),
}  # fmt: skip
EXTRAS = {"temporal connect": "temporal", "postgres store": "postgres", "postgres memory":
          "postgres"}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_missing_extra_names_the_line_that_installs_it(case: str) -> None:
    module, code = CASES[case]
    extra = EXTRAS.get(case, case)
    indented = "\n".join(f"    {line}" for line in code.splitlines())
    done = subprocess.run(
        [sys.executable, "-c", _BLOCK.format(module=module, code=indented)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    out = done.stdout.strip()
    kind, name, _ = out.split(" ", 2)
    assert (kind, name) == ("ModuleNotFoundError", module), out
    assert f"needs agentledger's [{extra}] extra, which is not installed (no module " in out
    assert out.endswith(f": {install_command(extra)}"), out
    assert "pip install 'agentledger[" not in out
