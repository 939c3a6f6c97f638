"""After the demo, the commands it prints (and the README's) serve its session to a browser."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import httpx

README = Path(__file__).parents[3] / "README.md"


def _agentledger(line: str) -> list[str]:
    words = _words(line)
    return [sys.executable, "-m", "agentledger", *words[1:]]


def _words(line: str) -> list[str]:
    """The command's words, its first one `agentledger` however the demo said to run it
    (a path to the console script, or `python -m agentledger`)."""
    words = shlex.split(line.split("#", 1)[0])
    if words[1:3] == ["-m", "agentledger"]:
        words = words[2:]
    assert Path(words[0]).name == "agentledger", line
    return ["agentledger", *words[1:]]


def test_demo_says_how_to_open_the_inspector_and_it_works(tmp_path: Path) -> None:
    """`make demo`'s job, then its printed token and serve commands: the session is on /ui."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"}
    run = subprocess.run(
        [sys.executable, "-m", "agentledger", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    tail = run.stdout.split("See it in the browser", 1)[1].splitlines()[1:]
    token_line, serve_line, open_line = (line.strip() for line in tail[:3])
    session_id = re.search(r"open (demo-\w+)$", open_line)
    assert session_id is not None, open_line
    # The README shows the same two commands.
    section = README.read_text(encoding="utf-8").split("## Web inspector", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    shown = [_words(line) for line in block.group(1).splitlines()]
    assert shown == [_words(token_line), _words(serve_line)]

    made = subprocess.run(
        _agentledger(token_line),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    token = made.stdout.strip()
    serve = subprocess.Popen(
        [*_agentledger(serve_line), "--listen", "127.0.0.1:0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(serve.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(60)
        assert first, "agentledger serve did not start"
        assert "listening on " in first[0], first[0]
        url = first[0].split("listening on ", 1)[1].split()[0]
        assert open_line.startswith("then open http://127.0.0.1:8470/ui")  # the default --listen
        with httpx.Client(base_url=url) as browser:
            assert browser.get("/ui").status_code == 303  # to the login form
            login = browser.post("/ui/login", data={"token": token})
            assert login.status_code == 303
            sessions = browser.get("/ui")
            assert sessions.status_code == 200
            assert session_id.group(1) in sessions.text
            page = browser.get("/ui/session", params={"id": session_id.group(1)})
            assert page.text.count('class="run-node') == 6  # four turns, a continuation, a child
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
