"""A missing optional extra is one line naming it, for every command that needs one.

Each command runs as the console script of a real core-only install (the wheel
and its core dependencies, no extra: the ``core_venv`` session fixture), so the
extras' modules are really absent. The line names the extra and a command that
installs it from where this agentledger came from (here: the wheel file), and
that command, run as printed, brings the extra.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import Demo, run_cli
from tests.installs import make_venv, run_in, uv_install

_KEYS = ["--keyring", "{keyring}", "--vault", "{vault}"]
_CASES = {
    "postgres DSN": ("postgres", ["--db", "postgresql://ledger@127.0.0.1:9/ledger", "sessions"]),
    "postgres conninfo": ("postgres", ["check", "--db", "host=127.0.0.1 port=9 dbname=ledger"]),
    "postgres migrate": ("postgres", ["migrate", "--db", "postgresql://ledger@127.0.0.1:9/x"]),
    "service URL": ("service", ["--store", "http://127.0.0.1:9", "sessions"]),
    "service tail": ("service", ["tail", "run-1", "--store", "http://127.0.0.1:9"]),
    "serve": ("service", ["serve", "--db", "{db}", "--tokens", "{dir}/tokens.json"]),
    "keys rotate": ("encryption", ["--db", "{db}", "keys", "rotate", *_KEYS]),
    "keys erase": ("encryption", ["--db", "{db}", "keys", "erase", "s-1", *_KEYS]),
    "worker": ("temporal", ["worker", "--temporal", "127.0.0.1:9", "--db", "{db}"]),
    "worker on a service": (
        "temporal", ["worker", "--temporal", "127.0.0.1:9", "--store", "http://127.0.0.1:9"]
    ),
    "demo with an Anthropic key": ("anthropic", ["--db", "{dir}/demo.db", "demo"]),
    "demo with an OpenAI key": ("openai", ["--db", "{dir}/demo.db", "demo"]),
    "demo with AWS credentials": ("bedrock", ["--db", "{dir}/demo.db", "demo"]),
    "sessions, keyring in the environment": ("encryption", ["--db", "{db}", "sessions"]),
}  # fmt: skip
_ENV = {
    "demo with an Anthropic key": {"ANTHROPIC_API_KEY": "sk-test"},
    "demo with an OpenAI key": {"OPENAI_API_KEY": "sk-test"},
    "demo with AWS credentials": {
        "AWS_ACCESS_KEY_ID": "AKIATEST",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_REGION": "us-east-1",
    },
    "sessions, keyring in the environment": {
        "AGENTLEDGER_KEYRING_FILE": "{keyring}",
        "AGENTLEDGER_VAULT": "{vault}",
    },
}


@pytest.fixture(scope="module")
def place(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A demo database, a keyring made by the core install itself, and where they are."""
    where = tmp_path_factory.mktemp("extras")
    db = where / "ledger.db"
    shutil.copy(demo.db, db)
    assert run_cli("keys", "add", "k1", "--keyring", str(where / "keyring.json")).code == 0
    keyring, vault = str(where / "keyring.json"), str(where / "keys.vault")
    return {"db": str(db), "dir": str(where), "keyring": keyring, "vault": vault}


def _refusal(extra: str, wheel: Path) -> str:
    return (
        rf".+ needs agentledger's \[{extra}\] extra, which is not installed "
        rf"\(no module '[a-z_0-9]+'\): pip install '{re.escape(str(wheel))}\[{extra}\]'"
    )


@pytest.mark.parametrize("case", list(_CASES))
def test_a_missing_extra_is_one_line_naming_it(
    case: str, core_venv: Path, wheel: Path, place: dict[str, str]
) -> None:
    extra, template = _CASES[case]
    args = [word.format(**place) for word in template]
    env = {k: v.format(**place) for k, v in _ENV.get(case, {}).items()}
    done = run_in(
        [core_venv / "bin" / "agentledger", *args], Path(place["dir"]), check=False, env=env
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert re.fullmatch(f"agentledger: error: {_refusal(extra, wheel)}\n", done.stderr), done.stderr
    as_json = run_in(
        [core_venv / "bin" / "agentledger", "--json", *args], Path(place["dir"]), check=False,
        env=env,
    )  # fmt: skip
    error = json.loads(as_json.stderr)["error"]
    assert (error["type"], error["fields"]["extra"]) == ("MissingExtra", extra)


def test_the_printed_command_installs_the_extra(
    core_venv: Path, wheel: Path, tmp_path: Path
) -> None:
    """Run as printed (pip's work done by uv, offline), it brings psycopg: the same command
    then gets as far as the database, which is not there (one line again)."""
    home = make_venv(tmp_path / "venv")
    uv_install(home, wheel, cwd=tmp_path)
    dsn = ["--db", "postgresql://ledger@127.0.0.1:9/ledger", "sessions"]
    before = run_in([home / "bin" / "agentledger", *dsn], tmp_path, check=False)
    printed = before.stderr.strip().rpartition(": ")[2]
    pip, install, spec = shlex.split(printed)
    assert (pip, install) == ("pip", "install")
    uv_install(home, spec, cwd=tmp_path)
    after = run_in([home / "bin" / "agentledger", *dsn], tmp_path, check=False)
    assert after.returncode == 1
    assert after.stderr.count("\n") == 1, after.stderr
    assert "extra" not in after.stderr
    assert "127.0.0.1" in after.stderr
