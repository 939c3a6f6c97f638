"""A throwaway PostgreSQL server for the tests: find (or install) it, start it, delete it.

Used by the ``postgres_dsn`` fixture in ``tests/conftest.py``, and runnable on
its own for poking at a store by hand::

    python tests/storage/postgres/server.py      # prints a DSN, runs until Ctrl-C

The cluster lives in a temporary directory, listens on 127.0.0.1 on a free
port (its unix socket stays inside the directory), runs without fsync (it is
thrown away; benchmarks ask for ``fsync=True``) and is stopped and deleted by
:meth:`PostgresServer.stop`. A small watchdog process does the same if the
owning process dies first (a killed test run), so no server outlives its run.
``initdb`` refuses to run as root, so as root the cluster belongs to the
``postgres`` user and every server command runs through ``runuser``.

Binaries are looked up on ``PATH`` and in ``/usr/lib/postgresql/*/bin``. If
there are none and we are root with ``apt-get`` (as in CI), Debian's
``postgresql`` package is installed first. Every failure raises
:class:`ServerError` with the reason and the server log: the tests never skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

__all__ = ["PostgresServer", "ServerError", "create_database", "drop_database", "find_bin_dir"]

_SEARCH = "/usr/lib/postgresql/*/bin"


class ServerError(RuntimeError):
    """The test server could not be found, installed, started or used."""


def _version_key(path: Path) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in path.parent.name.split("."))
    except ValueError:
        return (0,)


def _find() -> Path | None:
    candidates = sorted(Path("/").glob(_SEARCH.lstrip("/")), key=_version_key, reverse=True)
    for bin_dir in candidates:
        if (bin_dir / "initdb").exists() and (bin_dir / "pg_ctl").exists():
            return bin_dir
    initdb = shutil.which("initdb")
    if initdb:
        bin_dir = Path(initdb).resolve().parent
        if (bin_dir / "pg_ctl").exists():
            return bin_dir
    return None


def _install() -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ServerError(
            "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin) "
            "and it cannot be installed here (needs root and apt-get); install it, or set "
            "AGENTLEDGER_TEST_PG_DSN to a server the tests may use"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"],
    ):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise ServerError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``, installing PostgreSQL if needed."""
    found = _find()
    if found is None:
        _install()
        found = _find()
    if found is None:
        raise ServerError("postgresql was installed but initdb/pg_ctl are still not found")
    return found


_WATCHDOG = """
import os, shutil, subprocess, sys, time
owner, root, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while os.path.isdir(root):
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        subprocess.run(cmd, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
        break
    time.sleep(1)
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One throwaway cluster. :meth:`start` returns a DSN; :meth:`stop` deletes everything."""

    def __init__(self, *, fsync: bool = False) -> None:
        """``fsync=True`` makes commits durable (for benchmarks); tests run without."""
        self.fsync = fsync
        self.root: Path | None = None
        self.port = 0
        self._bin: Path | None = None
        self._as_postgres = os.geteuid() == 0
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def _data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def _log(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self._bin is not None
        cmd = [str(self._bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)

    def _fail(self, what: str, done: subprocess.CompletedProcess[str]) -> ServerError:
        log = ""
        with contextlib.suppress(OSError):
            log = self._log.read_text()[-4000:]
        self.stop()
        return ServerError(f"{what} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}")

    def start(self) -> str:
        """Create and start the cluster; the DSN of its ``postgres`` database."""
        self._bin = find_bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="agentledger-pg-"))
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        done = self._run(
            "initdb", "-D", str(self._data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--no-locale", "--no-sync",
        )  # fmt: skip
        if done.returncode:
            raise self._fail("initdb", done)
        for attempt in range(3):
            self.port = _free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                "-c max_connections=200 -c shared_buffers=64MB "
                + (
                    "-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
                    if self.fsync
                    else "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
                )
            )
            done = self._run(
                "pg_ctl", "-D", str(self._data), "-l", str(self._log), "-o", options, "-w",
                "-t", "60", "start",
            )  # fmt: skip
            if done.returncode == 0:
                self._watch()
                return self.dsn("postgres")
            if attempt == 2:
                raise self._fail("pg_ctl start", done)
        raise AssertionError("unreachable")

    def _stop_command(self) -> list[str]:
        assert self._bin is not None
        cmd = [str(self._bin / "pg_ctl"), "-D", str(self._data), "-m", "immediate", "-w", "stop"]
        return ["runuser", "-u", "postgres", "--", *cmd] if self._as_postgres else cmd

    def _watch(self) -> None:
        """Start the watchdog that stops and deletes the cluster if this process dies."""
        self._watchdog = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WATCHDOG,
                str(os.getpid()),
                str(self.root),
                *self._stop_command(),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def dsn(self, dbname: str) -> str:
        """The DSN of database ``dbname`` on this server."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def stop(self) -> None:
        """Stop the server and delete its directory; safe to call twice."""
        if self.root is None:
            return
        if (self._data / "postmaster.pid").exists():
            subprocess.run(self._stop_command(), capture_output=True, check=False, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
        if self._watchdog is not None:
            self._watchdog.wait(timeout=10)  # it sees the directory gone and exits
            self._watchdog = None


def create_database(dsn: str, prefix: str = "agentledger_test") -> str:
    """Create a fresh database on the server of ``dsn``; the DSN that reaches it."""
    import psycopg
    from psycopg import conninfo, sql

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as e:
        raise ServerError(f"cannot create a test database on the server: {e}") from e
    return conninfo.make_conninfo(dsn, dbname=name)


def drop_database(dsn: str) -> None:
    """Drop the database ``dsn`` names (connecting to ``postgres`` on the same server)."""
    import psycopg
    from psycopg import conninfo, sql

    name = conninfo.conninfo_to_dict(dsn)["dbname"]
    admin = conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )


def main() -> int:
    """Start a server, print its DSN, and keep it until interrupted."""
    server = PostgresServer()
    try:
        dsn = server.start()
    except ServerError as e:
        print(e, file=sys.stderr)
        return 1
    print(dsn, flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
