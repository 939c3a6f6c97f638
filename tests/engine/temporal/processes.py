"""Worker processes for the tests: ``python -m agentledger worker ...`` in a subprocess.

A :class:`WorkerProcess` starts the real command line, waits for its
``polling`` line, and can be stopped (SIGTERM, expecting exit 0) or killed
(SIGKILL, as a crash). It dies with the test process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from tests.engine.temporal.server import _die_with_parent

__all__ = ["ROOT", "WorkerProcess"]

ROOT = Path(__file__).resolve().parents[3]
"""The repository root (the worker's cwd, so ``tests.`` apps import)."""


class WorkerProcess:
    """One ``agentledger worker`` subprocess."""

    def __init__(
        self,
        *,
        temporal: str,
        db: str,
        task_queue: str,
        app: str = "tests.engine.temporal.apps:setup",
        env: Mapping[str, str] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.cmd = [
            sys.executable,
            "-m",
            "agentledger",
            "worker",
            "--temporal",
            temporal,
            "--db",
            db,
            "--task-queue",
            task_queue,
            "--app",
            app,
            *extra,
        ]
        self.env = {**os.environ, **(env or {})}
        self.lines: list[str] = []
        self._process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self, within: float = 60.0) -> WorkerProcess:
        """Start the worker and wait until it polls."""
        self._process = subprocess.Popen(
            self.cmd,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + within
        while not self._ready.wait(0.05):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"worker did not start: {self.output()}")
        return self

    def _read(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self.lines.append(line.rstrip("\n"))
            if "agentledger worker: polling" in line:
                self._ready.set()

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def output(self) -> str:
        """Everything the worker printed so far."""
        return "\n".join(self.lines)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing cleaned up."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        """Once the process is gone: read what is left of its output, close the pipe."""
        if self._process is None or self._process.poll() is None:
            return
        if self._reader is not None:
            self._reader.join(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()

    def stop(self, within: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        assert self._process is not None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
        try:
            code = self._process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"worker ignored SIGTERM: {self.output()}") from None
        self._close()
        return code
