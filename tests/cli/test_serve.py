"""`agentledger serve` as a new user meets it: where the inspector is, what `/` and
`/metrics` answer, and what a clean stop leaves beside the database (nothing)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from tests.cli.conftest import ROOT, Demo, ctrl_c_reaches_children, run_cli
from tests.service.process import Tokens


def test_serve_names_the_inspector_redirects_to_it_and_leaves_no_lock(
    demo: Demo, tmp_path: Path
) -> None:
    db = demo.copy(tmp_path)
    tokens = Tokens(tmp_path / "tokens.json")
    server = subprocess.Popen(
        [sys.executable, "-m", "agentledger", "serve", "--db", str(db), "--listen",
         "127.0.0.1:0", "--tokens", str(tokens.path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        url = banner.split("listening on ", 1)[1].split()[0]
        assert banner.rstrip().endswith(f"web inspector: {url}/ui"), banner
        assert (tmp_path / "copy.db.serve.lock").exists()  # held while serving
        root = httpx.get(f"{url}/", follow_redirects=False)
        assert (root.status_code, root.headers["location"]) == (302, "/ui")
        metrics = httpx.get(f"{url}/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"].count("charset") == 1, metrics.headers
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, err
    assert out.splitlines()[-1] == "agentledger serve: stopped"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "tokens.json"]


def _serve(db: Path, tokens: Path, listen: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "agentledger", "serve", "--db", str(db), "--listen", listen,
            "--tokens", str(tokens), *options]  # fmt: skip


def _one_line_refusal(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.returncode == code, done.stderr
    return done.stderr


def test_serve_on_a_port_in_use_is_one_line_and_exit_1(demo: Demo, tmp_path: Path) -> None:
    db = demo.copy(tmp_path)
    tokens = Tokens(tmp_path / "tokens.json")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            _serve(db, tokens.path, listen), capture_output=True, text=True, cwd=ROOT, timeout=120
        )
    line = _one_line_refusal(done)
    assert line.startswith(f"agentledger serve: error: cannot listen on {listen}: "), line
    assert "in use" in line, line
    assert "--listen" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "tokens.json"]


def test_serve_on_an_address_not_of_this_machine_is_one_line_and_exit_1(
    demo: Demo, tmp_path: Path
) -> None:
    db = demo.copy(tmp_path)
    tokens = Tokens(tmp_path / "tokens.json")
    done = subprocess.run(
        _serve(db, tokens.path, "192.0.2.1:8470"),
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    line = _one_line_refusal(done)
    assert "cannot listen on 192.0.2.1:8470: this machine has no such address" in line, line


def test_ctrl_c_while_serve_opens_its_store_is_one_line_and_exit_130(
    demo: Demo, tmp_path: Path
) -> None:
    db = demo.copy(tmp_path)
    tokens = Tokens(tmp_path / "tokens.json")
    mark = tmp_path / "mark"
    with ctrl_c_reaches_children():  # not an ignored SIGINT inherited from the test run
        server = subprocess.Popen(
            _serve(db, tokens.path, "127.0.0.1:0", "--host-runtime",
                   "tests.cli.startup_hosts:waiting"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            # faulthandler: a serve that does not stop dumps where each thread waits (SIGABRT)
            env={**os.environ, "STARTUP_MARK": str(mark), "PYTHONFAULTHANDLER": "1"},
        )  # fmt: skip
    try:
        while not mark.exists() and server.poll() is None:  # wait for the condition
            threading.Event().wait(0.01)
        server.send_signal(signal.SIGINT)
        try:
            out, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)
            _, err = server.communicate(timeout=30)
            raise AssertionError(f"serve did not stop on Ctrl-C; its threads:\n{err}") from None
    finally:
        if server.poll() is None:
            server.kill()
    done = subprocess.CompletedProcess(server.args, server.returncode, out, err)
    assert _one_line_refusal(done, 130) == "agentledger serve: interrupted (Ctrl-C)\n"
    assert out == ""


def test_ctrl_c_as_the_http_server_starts_is_one_line_and_exit_130(
    demo: Demo, tmp_path: Path
) -> None:
    db = demo.copy(tmp_path)
    tokens = Tokens(tmp_path / "tokens.json")
    done = subprocess.run(
        _serve(db, tokens.path, "127.0.0.1:0", "--host-runtime",
               "tests.cli.startup_hosts:interrupting"),
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    if "listening on" in done.stdout:  # the Ctrl-C came once it listened: a clean stop
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.splitlines()[-1] == "agentledger serve: stopped"
    else:
        assert _one_line_refusal(done, 130) == "agentledger serve: interrupted (Ctrl-C)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "tokens.json"]


def _serves(args: list[str], env: dict[str, str]) -> str:
    """Start ``agentledger ARGS``, wait for its first line, stop it with SIGTERM; that line."""
    server = subprocess.Popen(
        [sys.executable, "-m", "agentledger", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, **env},
    )  # fmt: skip
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err
    return banner


def test_serve_takes_db_before_the_command_or_from_the_environment(
    demo: Demo, tmp_path: Path
) -> None:
    db = demo.copy(tmp_path)
    tokens = Tokens(tmp_path / "tokens.json")
    rest = ["--listen", "127.0.0.1:0", "--tokens", str(tokens.path)]
    before = _serves(["--db", str(db), "serve", *rest], {})
    assert f"(store {db}," in before, before
    from_env = _serves(["serve", *rest], {"AGENTLEDGER_DB": str(db)})
    assert f"(store {db}," in from_env, from_env
    env = {k: v for k, v in os.environ.items() if k != "AGENTLEDGER_DB"}
    missing = subprocess.run(
        [sys.executable, "-m", "agentledger", "serve", *rest],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2, missing.stderr
    assert "Missing option '--db'" in missing.stderr
    assert "$AGENTLEDGER_DB" in missing.stderr


def test_serve_help_gives_its_exit_status() -> None:
    out = " ".join(run_cli("serve", "--help").out.split())
    assert "Exit status: 0 once stopped; 1 when it cannot start" in out
    assert "130 for a Ctrl-C before it listens" in out
