"""No command prints a PostgreSQL password: not on success, not in a refusal, not in a log line.

Every command that takes ``--db`` runs as a real process against a real
PostgreSQL (whose trust authentication ignores the password), with the
password in a ``key=value`` string and in a URL; ``serve`` and ``worker`` run
until their ready line and are stopped with SIGTERM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg import conninfo

from tests.cli.conftest import ROOT
from tests.engine.temporal.processes import WorkerProcess
from tests.service.process import ServiceProcess, Tokens

SECRET = "pw-s3cret-9f2c"


def _forms(dsn: str) -> dict[str, str]:
    """``dsn`` with :data:`SECRET` as its password: libpq key=value and URL forms."""
    params = conninfo.conninfo_to_dict(dsn)
    params.pop("password", None)
    url = (
        f"postgresql://{params.get('user', 'postgres')}:{SECRET}@{params.get('host', '127.0.0.1')}"
        f":{params.get('port', 5432)}/{params['dbname']}"
    )
    return {
        "key=value": conninfo.make_conninfo(
            **{str(k): str(v) for k, v in params.items()}, password=SECRET
        ),
        "url": url,
        "url-query": url.replace(f":{SECRET}@", "@") + f"?password={SECRET}",
    }


@pytest.fixture(params=["key=value", "url", "url-query"])
def secret_dsn(request: pytest.FixtureRequest, postgres_dsn: str) -> str:
    return _forms(postgres_dsn)[request.param]


def _agentledger(*args: str) -> str:
    """Run ``python -m agentledger ARGS``; everything it printed (stdout and stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "agentledger", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"},
        timeout=120,
    )
    return f"{done.stdout}\n{done.stderr}"


def _unreachable(dsn: str) -> str:
    """``dsn`` pointed at a port nothing listens on."""
    from tests.service.process import free_port

    params = conninfo.conninfo_to_dict(dsn)
    return dsn.replace(f":{params.get('port', 5432)}/", f":{free_port()}/").replace(
        f"port={params.get('port', 5432)}", f"port={free_port()}"
    )


def test_no_command_prints_the_password(secret_dsn: str, tmp_path: Path) -> None:
    assert "schema version" in _agentledger("migrate", "--db", secret_dsn)  # it ran
    outputs = {
        "sessions": _agentledger("--db", secret_dsn, "sessions"),
        "sessions --json": _agentledger("--json", "sessions", "--db", secret_dsn),
        "runs": _agentledger("runs", "no-such-session", "--db", secret_dsn),
        "records": _agentledger("records", "no-such-run", "--db", secret_dsn),
        "check": _agentledger("check", "--db", secret_dsn),
        "check --json": _agentledger("check", "--json", "--db", secret_dsn),
        "session end": _agentledger("session", "end", "no-such-session", "--db", secret_dsn),
        "restore": _agentledger("restore", str(tmp_path / "none.alar"), "--db", secret_dsn),
        "demo": _agentledger("demo", "--db", secret_dsn),
        "keys rotate": _agentledger("keys", "rotate", "--db", secret_dsn),
        "migrate again": _agentledger("migrate", "--json", "--db", secret_dsn),
        "unreachable": _agentledger("sessions", "--db", _unreachable(secret_dsn)),
        "unreachable migrate": _agentledger("migrate", "--db", _unreachable(secret_dsn)),
        "malformed": _agentledger("sessions", "--db", secret_dsn + " port=notaport"),
    }
    leaked = {name: out for name, out in outputs.items() if SECRET in out}
    assert not leaked
    assert "***" in outputs["demo"] or "@" in outputs["demo"]  # the target is named, masked


def test_serve_and_worker_print_no_password(
    secret_dsn: str, tmp_path: Path, temporal_address: str
) -> None:
    tokens = Tokens(tmp_path / "tokens.json")
    service = ServiceProcess(secret_dsn, tokens.path).start()
    code, out, err = service.stop()
    assert code == 0, err
    assert "stopped" in out
    assert SECRET not in service.ready + out + err
    assert "listening on" in service.ready
    worker = WorkerProcess(
        temporal=temporal_address, db=secret_dsn, task_queue=f"secrets-{os.getpid()}"
    ).start()
    assert worker.stop() == 0
    assert "agentledger worker: polling" in worker.output()
    assert SECRET not in worker.output()
    refused = _agentledger("serve", "--db", _unreachable(secret_dsn), "--tokens", str(tokens.path))
    assert "error" in refused
    assert SECRET not in refused
