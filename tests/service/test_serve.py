"""[S1] ``agentledger serve`` and ``agentledger token new`` as real processes.

One process per SQLite file (a second ``serve`` is refused), and a graceful
shutdown: the call in flight finishes, new connections are refused, the
process exits 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from agentledger.errors import TransientError
from agentledger.service import StoreClient
from agentledger.storage import Session, SessionStatus
from agentledger.storage.encryption import Keyring
from tests.service.process import ServiceProcess, Tokens

AT = datetime(2026, 7, 1, tzinfo=UTC)


def _agentledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentledger", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "AGENTLEDGER_TOKEN"},
    )


@pytest.mark.parametrize("command", [("serve",), ("token", "new")])
def test_help_lists_the_options(command: tuple[str, ...]) -> None:
    done = _agentledger(*command, "--help")
    assert done.returncode == 0, done.stderr
    serve = ("--tokens", "--db", "--listen", "--max-payload-bytes", "--max-checkpoint-bytes")
    options = serve if command == ("serve",) else ("--role", "--label")
    for option in options:
        assert option in done.stdout


def test_token_new_prints_the_token_once_and_stores_its_hash(tmp_path: Path) -> None:
    """[S4] the file gets the sha256, role and labels; the token is only printed."""
    file = tmp_path / "tokens.json"
    done = _agentledger("token", "new", "--role", "worker", "--label", "tenant=acme",
                        "--label", "team=a=b", "--tokens", str(file))  # fmt: skip
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert len(token) > 40
    text = file.read_text()
    assert token not in text
    assert json.loads(text) == {"tokens": [{
        "sha256": hashlib.sha256(token.encode()).hexdigest(),
        "role": "worker",
        "labels": {"tenant": "acme", "team": "a=b"},
    }]}  # fmt: skip
    assert oct(file.stat().st_mode & 0o777) == "0o600"
    again = _agentledger("token", "new", "--role", "host", "--tokens", str(file))
    assert len(json.loads(file.read_text())["tokens"]) == 2
    assert again.stdout.strip() != token
    bad = _agentledger("token", "new", "--role", "host", "--label", "nokey", "--tokens", str(file))
    assert bad.returncode == 1
    assert "K=V" in bad.stderr


def test_a_second_serve_on_one_sqlite_file_is_refused(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S1] a SQLite file is served by one process."""
    done = _agentledger("serve", "--db", sqlite_service.db, "--listen", "127.0.0.1:0",
                        "--tokens", str(tokens.path))  # fmt: skip
    assert done.returncode == 1
    assert "already served by another `agentledger serve`" in done.stderr
    assert f"pid {sqlite_service.pid}" in done.stderr


def test_serve_refuses_a_missing_token_file(tmp_path: Path) -> None:
    done = _agentledger("serve", "--db", str(tmp_path / "x.db"), "--listen", "127.0.0.1:0",
                        "--tokens", str(tmp_path / "none.json"))  # fmt: skip
    assert done.returncode == 1
    assert "agentledger token new" in done.stderr


async def _in_flight(url: str) -> float:
    async with httpx.AsyncClient(base_url=url) as http:
        text = (await http.get("/metrics")).text
    line = next(x for x in text.splitlines() if x.startswith("agentledger_requests_in_flight "))
    return float(line.split()[1])


async def test_graceful_shutdown_finishes_the_call_in_flight(
    tmp_path: Path, tokens: Tokens
) -> None:
    """[S1] SIGTERM: the call in flight completes, new connections are refused, exit 0."""
    db = tmp_path / "graceful.db"
    service = ServiceProcess(str(db), tokens.path).start()
    try:
        async with StoreClient(service.url, token=tokens.host) as client:
            await client.create_session("graceful-warm", created_at=AT)
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")  # the service's write now waits for this lock
            call = asyncio.create_task(client.create_session("graceful-s", created_at=AT))
            deadline = time.monotonic() + 3
            while await _in_flight(service.url) < 1:
                assert time.monotonic() < deadline, "the call never reached the service"
            service.terminate()
            refused = False
            async with StoreClient(service.url, token=tokens.host) as newcomer:
                while not refused and time.monotonic() < deadline + 2:
                    try:
                        await newcomer.load_session_status("graceful-warm")
                    except TransientError:
                        refused = True
            assert not call.done()
            holder.rollback()
            holder.close()
            assert refused, "a new call was still served after SIGTERM"
            session = await call
        assert session == Session(id="graceful-s", status=SessionStatus.ACTIVE, created_at=AT)
    finally:
        code, out, err = service.stop()
    assert code == 0, err
    assert "agentledger serve: stopped" in out
    with ServiceProcess(str(db), tokens.path) as again:  # the lock was released
        async with StoreClient(again.url, token=tokens.reader) as reader:
            assert await reader.load_session_status("graceful-s") is SessionStatus.ACTIVE


async def test_the_cli_reads_through_the_service(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """``agentledger --store URL`` wherever ``--db`` is taken; the token from the environment."""
    async with StoreClient(sqlite_service.url, token=tokens.host) as host:
        await host.create_session("cli-through", created_at=AT, labels={"via": "service"})
    env = {**os.environ, "AGENTLEDGER_TOKEN": tokens.reader}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentledger", "--json", "--store", sqlite_service.url, "sessions"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = {s["id"]: s for s in json.loads(done.stdout)["sessions"]}
    assert listed["cli-through"]["labels"] == {"via": "service"}
    env["AGENTLEDGER_TOKEN"] = ""
    denied = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentledger", "--store", sqlite_service.url, "sessions"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert denied.returncode == 1
    assert "401" in denied.stderr


async def test_replicas_may_share_one_postgres_database(
    postgres_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S1] no lock for PostgreSQL: a second service on the same database serves the same data."""
    with ServiceProcess(postgres_service.db, tokens.path) as replica:
        async with (
            StoreClient(postgres_service.url, token=tokens.host) as one,
            StoreClient(replica.url, token=tokens.host) as other,
        ):
            await one.create_session("replica-s", created_at=AT, labels={"via": "one"})
            assert (await other.load_session("replica-s")).labels == {"via": "one"}
            ended = await other.end_session("replica-s", ended_at=AT)
            assert (await one.load_session("replica-s")) == ended


def _appends_answered(url: str) -> float:
    """How many append_run_record calls a service has answered, from its /metrics."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('agentledger_requests_total{method="append_run_record"'):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_replicas_share_the_load_of_one_sessions_runs(
    postgres_service: ServiceProcess, tokens: Tokens
) -> None:
    """[S1] [X1] workers spread over two replicas: every append lands once, in order per run,
    each replica answers its share, and a retry through the other replica is answered
    with the original id."""
    from agentledger.storage import RecordBuilder, RunStart

    with ServiceProcess(postgres_service.db, tokens.path) as replica:
        urls = (postgres_service.url, replica.url)
        before = [_appends_answered(u) for u in urls]
        clients = [StoreClient(urls[i % 2], token=tokens.host) for i in range(8)]
        try:
            await clients[0].create_session("shared-s", created_at=AT)
            runs = [RecordBuilder(RunStart(run_id=f"shared-{i}", agent_id="a",
                                           session_id="shared-s", started_at=AT))
                    for i in range(8)]  # fmt: skip
            for i, run in enumerate(runs):
                await clients[(i + 1) % 8].start_root_run(run.root_start())

            async def worker(client: StoreClient, run: RecordBuilder) -> None:
                for n in range(20):
                    note = run.record("note", b'{"n": %d}' % n, event_key=f"n{n}", at=AT)
                    await client.append_run_record(note)

            await asyncio.gather(*(worker(c, r) for c, r in zip(clients, runs, strict=True)))
            again = runs[0].record("note", b'{"n": 0}', event_key="n0", at=AT)
            retried = await clients[1].append_run_record(again)  # the other replica
            assert (retried.id, retried.inserted) == ("2", False)
            for i, run in enumerate(runs):
                page = await clients[i].list_run_records(run.run.run_id, limit=100)
                assert [r.event_key for r in page.records] == [
                    "run_started",
                    *(f"n{n}" for n in range(20)),
                ]
        finally:
            for client in clients:
                await client.close()
        answered = [_appends_answered(u) - b for u, b in zip(urls, before, strict=True)]
    assert answered[0] == 80
    assert answered[1] == 81


async def _a_finished_run(url: str, token: str) -> None:
    from agentledger.storage import RecordBuilder, RunStart, RunStatus

    async with StoreClient(url, token=token) as host:
        await host.create_session("cli-reads", created_at=AT)
        run = RecordBuilder(
            RunStart(run_id="cli-run", agent_id="a", session_id="cli-reads", started_at=AT)
        )
        await host.start_root_run(run.root_start())
        await host.append_run_records(
            [run.record("note", b'{"n":%d}' % n, event_key=f"n{n}", at=AT) for n in range(3)]
        )
        await host.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=AT))


def test_the_read_commands_work_through_the_service(
    sqlite_service: ServiceProcess, tokens: Tokens, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[DESIGN 11] runs, records, tail, transcript and check read a store through its service."""
    from tests.cli.conftest import run_cli

    asyncio.run(_a_finished_run(sqlite_service.url, tokens.host))
    monkeypatch.setenv("AGENTLEDGER_TOKEN", tokens.reader)
    via = ("--store", sqlite_service.url, "--json")
    runs = run_cli(*via, "runs", "cli-reads").json()
    assert [(r["run_id"], r["status"]) for r in runs["runs"]] == [("cli-run", "completed")]
    records = run_cli(*via, "records", "cli-run", "--type", "note").json()["records"]
    assert [r["payload"] for r in records] == [{"n": 0}, {"n": 1}, {"n": 2}]
    tailed = run_cli(*via, "tail", "cli-run")
    assert tailed.code == 0, tailed.err
    assert [json.loads(line)["type"] for line in tailed.out.splitlines()] == [
        "run_started", "note", "note", "note", "run_completed",
    ]  # fmt: skip
    assert run_cli(*via, "transcript", "cli-run").json() == []
    checked = run_cli(*via, "check")
    assert checked.code == 0, checked.out + checked.err


@pytest.mark.parametrize(("configured", "mode"), [(None, 0o600), ("0640", 0o640)])
async def test_the_files_serve_creates_are_owner_only_unless_configured(
    tmp_path: Path, tokens: Tokens, configured: str | None, mode: int
) -> None:
    """The database, its WAL files, the serve lock and the key vault: 0600 (or as configured)."""
    keyring = Keyring.generate("k1")
    ring = tmp_path / "keyring.json"
    ring.write_text(keyring.to_json())
    db, vault = tmp_path / "ledger.db", tmp_path / "keys.vault"
    env = {"AGENTLEDGER_KEYRING_FILE": str(ring), "AGENTLEDGER_VAULT": str(vault)}
    if configured is not None:
        env["AGENTLEDGER_FILE_MODE"] = configured
    with ServiceProcess(str(db), tokens.path, env=env) as service:
        async with StoreClient(service.url, token=tokens.host) as client:
            await client.create_session("modes", created_at=datetime(2026, 1, 1, tzinfo=UTC))
        created = [db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}.serve.lock"), vault]
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in created}
    assert modes == {p.name: oct(mode) for p in created}


def test_serve_takes_a_durability(tmp_path: Path, tokens: Tokens) -> None:
    """``--durability normal`` serves a SQLite file; PostgreSQL's is its server's, refused."""
    from tests.cli.conftest import run_cli

    with ServiceProcess(str(tmp_path / "n.db"), tokens.path, options=("--durability", "normal")):
        pass
    done = run_cli("serve", "--db", "postgresql://nobody@127.0.0.1:1/none", "--tokens",
                   str(tokens.path), "--durability", "normal")  # fmt: skip
    assert done.code == 1
    assert "durability" in done.err


@pytest.mark.parametrize(("setting", "secure"), [("auto", False), ("always", True)])
async def test_the_login_cookies_secure_flag_follows_the_setting(
    tmp_path: Path, tokens: Tokens, setting: str, secure: bool
) -> None:
    """Behind a TLS proxy on another host the service sees HTTP: ``always`` still marks it.

    The proxy is played from 127.0.0.2, whose ``X-Forwarded-Proto`` uvicorn does not trust.
    """
    options = ("--secure-cookies", setting)
    proxy = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    with ServiceProcess(str(tmp_path / "c.db"), tokens.path, options=options) as service:
        async with httpx.AsyncClient(base_url=service.url, transport=proxy) as http:
            answer = await http.post("/ui/login", data={"token": tokens.reader, "next": "/ui"},
                                     headers={"X-Forwarded-Proto": "https"})  # fmt: skip
    assert answer.status_code == 303
    flags = [f.strip() for f in answer.headers["set-cookie"].split(";")]
    assert ("Secure" in flags) is secure
