"""docs/inspector.md is real: its price table loads, its command runs, and a bad table stops it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from agentledger.service.inspector.usage import load_prices
from tests.service.process import ServiceProcess, Tokens

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "inspector.md"
TEXT = DOC.read_text(encoding="utf-8")


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", TEXT, re.S)


def test_the_documented_price_table_loads(tmp_path: Path) -> None:
    (table,) = _blocks("toml")
    path = tmp_path / "prices.toml"
    path.write_text(table, encoding="utf-8")
    prices = load_prices(str(path))
    assert prices is not None
    assert prices.currency == "USD"
    assert set(prices.models) == {"claude-sonnet-4-5", "gpt-4.1-mini"}
    assert str(prices.models["gpt-4.1-mini"].input) == "0.40"


def test_the_documented_command_serves_with_prices_and_a_bad_table_stops_it(
    tmp_path: Path, tokens: Tokens
) -> None:
    """The doc's ``AGENTLEDGER_PRICES=… agentledger serve`` starts; a broken table is refused."""
    block = next(b for b in _blocks("sh") if "AGENTLEDGER_PRICES" in b)
    (line,) = [x for x in block.splitlines() if x.strip()]
    assignment, _, command = line.partition(" ")
    assert assignment == "AGENTLEDGER_PRICES=prices.toml"
    argv = shlex.split(command)
    assert argv[:2] == ["agentledger", "serve"]
    (tmp_path / "prices.toml").write_text(_blocks("toml")[0], encoding="utf-8")
    db = tmp_path / "agentledger.db"
    env = {"AGENTLEDGER_PRICES": str(tmp_path / "prices.toml")}
    with ServiceProcess(str(db), tokens.path, env=env) as process:
        assert process.url
    (tmp_path / "prices.toml").write_text("[models.m]\ninput = -1\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "agentledger", "serve", "--db", str(db), "--tokens",
         str(tokens.path), "--listen", "127.0.0.1:0"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "models.m.input" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_documented_host_runtime_serves_and_a_bad_one_stops_it(
    tmp_path: Path, tokens: Tokens
) -> None:
    """The doc's factory, saved as ``my_host.py``, is what its ``serve --host-runtime`` loads;
    a factory that is not there stops the service with the spec at fault, no traceback."""
    (factory,) = _blocks("python")
    (tmp_path / "my_host.py").write_text(factory, encoding="utf-8")
    block = next(b for b in _blocks("sh") if "--host-runtime" in b)
    (line,) = [x for x in block.splitlines() if x.strip()]
    argv = shlex.split(line)
    assert argv[:2] == ["agentledger", "serve"]
    spec = argv[argv.index("--host-runtime") + 1]
    assert spec == "my_host:host_runtime"
    path = os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH", ""))))
    db = tmp_path / "agentledger.db"
    options = ("--host-runtime", spec)
    with ServiceProcess(str(db), tokens.path, env={"PYTHONPATH": path}, options=options) as served:
        assert served.url
    for bad, says in (("my_host:no_such", "a callable named 'no_such'"),
                      ("no_such_module:f", "a module this Python can import"),
                      ("my_host", "package.module:factory")):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "agentledger", "serve", "--db", str(db), "--tokens",
             str(tokens.path), "--listen", "127.0.0.1:0", "--host-runtime", bad],
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        assert done.returncode != 0, bad
        assert says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_readme_shows_the_waterfall_and_the_conversation() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Web inspector", 1)[1].split("\n## ", 1)[0]
    for picture in ("docs/inspector-timeline.png", "docs/inspector-conversation.png"):
        assert f"]({picture})" in section
        assert (ROOT / picture).stat().st_size > 10_000
    assert "(docs/inspector.md)" in section
