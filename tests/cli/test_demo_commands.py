"""The commands the demo prints run as printed, from the shell the demo ran in.

The demo runs as the console script of a real install (the ``core_venv``
fixture) whose venv is not active (its ``bin`` is not on ``PATH``, as after
``make demo``); every "Inspect it" and browser command it prints then runs
as written, in the same directory.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from tests.installs import clean_env


def _run(argv: list[str], cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env={**clean_env(), "PATH": path}, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_the_printed_commands_run_as_printed(core_venv: Path, tmp_path: Path) -> None:
    path = os.environ.get("PATH", "")
    assert str(core_venv / "bin") not in path.split(os.pathsep)
    demo = _run([str(core_venv / "bin" / "agentledger"), "demo"], tmp_path, path)
    assert demo.returncode == 0, demo.stderr
    after = demo.stdout.split("Inspect it:\n", 1)[1]
    inspect, browser = after.split("See it in the browser", 1)
    lines = [line.strip() for line in inspect.splitlines() if line.strip()]
    lines += [line.strip() for line in browser.splitlines()[1:3]]
    assert len(lines) == 7, lines
    for line in lines:
        words = shlex.split(line, comments=True)
        assert Path(words[0]).name == "agentledger", line
        if words[1] == "serve":
            words += ["--listen", "127.0.0.1:0", "--help"]  # parsed, not served (no extra)
        done = _run(words, tmp_path, path)
        assert done.returncode == 0, (line, done.stderr)
    active = _run(
        [str(core_venv / "bin" / "agentledger"), "demo"], tmp_path,
        os.pathsep.join([str(core_venv / "bin"), path]),
    )  # fmt: skip
    assert "\n  agentledger sessions\n" in active.stdout  # an active venv: the bare name
