"""A real ``agentledger serve`` process on loopback, for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType

from agentledger.service.auth import add_token

__all__ = ["ServiceProcess", "Tokens", "free_port"]


def free_port() -> int:
    """A loopback port nothing listens on now (for a service restarted on one address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Tokens:
    """A token file holding one unscoped token per role (and any scoped ones added)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.host = add_token(path, "host")
        self.worker = add_token(path, "worker")
        self.reader = add_token(path, "reader")
        # Scoped to tenant=acme, for the label-scope tests.
        self.acme = {role: add_token(path, role, {"tenant": "acme"}) for role in ("host", "reader")}

    def scoped(self, role: str, **labels: str) -> str:
        """A new token of ``role`` scoped to ``labels`` (a running service will not see it)."""
        return add_token(self.path, role, labels)


class ServiceProcess:
    """``python -m agentledger serve`` in a subprocess; ``url`` once it listens."""

    def __init__(
        self,
        db: str,
        tokens: Path,
        *,
        listen: str = "127.0.0.1:0",
        env: dict[str, str] | None = None,
        options: tuple[str, ...] = (),
    ) -> None:
        self.db = db
        self.options = options
        self.tokens = tokens
        self.listen = listen
        self.env = env
        self.url = ""
        self.ready = ""
        """The line it printed once listening."""
        self.process: subprocess.Popen[str] | None = None
        self.terminated = False

    def start(self, timeout: float = 60.0) -> ServiceProcess:
        """Start the server and wait for its ``listening on URL`` line."""
        cmd = [sys.executable, "-m", "agentledger", "serve", "--db", self.db,
               "--listen", self.listen, "--tokens", str(self.tokens), *self.options]  # fmt: skip
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(self.env or {})},
        )
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        first = line[0] if line else ""
        if "listening on " not in first:
            self.process.kill()
            _, err = self.process.communicate(timeout=10)
            raise AssertionError(f"agentledger serve did not start: {first!r} {err}")
        self.ready = first
        self.url = first.split("listening on ", 1)[1].split()[0]
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def terminate(self) -> None:
        """SIGTERM (once): begin a graceful shutdown."""
        assert self.process is not None
        if not self.terminated and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.terminated = True

    def stop(self, timeout: float = 30.0) -> tuple[int, str, str]:
        """SIGTERM (unless sent already), then wait; (exit status, stdout, stderr)."""
        assert self.process is not None
        self.terminate()
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate(timeout=10)
        return self.process.returncode, out, err

    def kill(self) -> None:
        """SIGKILL: no graceful anything."""
        assert self.process is not None
        self.process.kill()
        self.process.communicate(timeout=10)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            code, _, err = self.stop()
            assert code == 0 or exc_type is not None, err
