"""`agentledger serve` as a new user meets it: where the inspector is, what `/` and
`/metrics` answer, and what a clean stop leaves beside the database (nothing)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.cli.conftest import ROOT, Demo
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
