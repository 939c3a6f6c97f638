"""PostgreSQL's data directory under the power-loss recorder (``fsync=on``).

``initdb`` and the server run under the recorder as the ``postgres`` user
(through ``runuser`` when we are root), so every write to the cluster, from
``initdb`` on, is in the log. Writer processes append through
:class:`~agentledger.storage.postgres.PostgresStore` and acknowledge each call.
For a cut, a server (without the recorder) is started on the cut's image: it
runs crash recovery, then every acknowledged append must be there and the
store's invariant check must be clean.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from agentledger.errors import AgentledgerError
from agentledger.storage.postgres import PostgresStore
from agentledger.storage.postgres.check import check_invariants
from tests.durability import workers
from tests.durability.image import DIRSYNC, Log, preload_env
from tests.storage.postgres.server import _free_port, find_bin_dir

__all__ = ["PostgresRun"]

_SETTINGS = (
    "-c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on "
    "-c full_page_writes=on -c shared_buffers=16MB -c max_wal_size=64MB -c min_wal_size=32MB"
)


_SYNC_DIRECTORY = "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)"


class PostgresRun:
    """One recorded cluster: record it, then check cuts of it."""

    def __init__(self, library: Path, writers: int, count: int) -> None:
        self.writers = writers
        self.count = count
        self.bin = find_bin_dir()
        self.as_postgres = os.geteuid() == 0
        # a world-readable place: the server runs as postgres and loads the recorder
        self.work = Path(tempfile.mkdtemp(prefix="power-loss-pg-"))
        self.work.chmod(0o755)
        self.library = self.work / "recorder.so"
        shutil.copy(library, self.library)
        self.library.chmod(0o755)
        self.root = self.work / "root"
        self.log = self.work / "log"
        self.ready = 0
        """The first record after initdb, once the cluster is durably there: cuts start here
        (a power loss during initdb leaves no cluster to promise anything about)."""

    def _cmd(self, *args: str) -> list[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        return ["runuser", "-u", "postgres", "--", *cmd] if self.as_postgres else cmd

    def _own(self, path: Path) -> None:
        if self.as_postgres:
            subprocess.run(["chown", "-R", "postgres:postgres", str(path)], check=True)

    def _start(self, data: Path, env: dict[str, str] | None, logfile: Path) -> str:
        port = _free_port()
        options = f"{_SETTINGS} -p {port} -k {self.work / 'sock'}"
        subprocess.run(
            self._cmd("pg_ctl", "-D", str(data), "-l", str(logfile), "-o", options, "-w", "start"),
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"

    def _stop(self, data: Path) -> None:
        subprocess.run(
            self._cmd("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"),
            check=False, capture_output=True, timeout=120,
        )  # fmt: skip

    def record(self) -> Log:
        """initdb, start, migrate, run the writers, stop: all under the recorder."""
        self.root.mkdir()
        (self.work / "sock").mkdir()
        self.log.touch(mode=0o666)
        self.log.chmod(0o666)
        self._own(self.root)
        self._own(self.work / "sock")
        env = preload_env(self.library, self.root, self.log)
        data = self.root / "data"
        subprocess.run(
            self._cmd("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                      "--no-locale"),
            env=env, check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        # initdb syncs the cluster but not its entry in the parent directory: the
        # operator's data directory is taken as durably there before the service runs
        subprocess.run([sys.executable, "-c", _SYNC_DIRECTORY, str(self.root)], env=env, check=True)
        dsn = self._start(data, env, self.work / "sock" / "server.log")
        try:
            asyncio.run(_migrate(dsn))
            env["PYTHONPATH"] = os.pathsep.join(
                [str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH", "")]
            )
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests.durability.workers",
                        "pg",
                        str(self.root),
                        str(me),
                        str(self.count),
                        dsn,
                    ],
                    env=env,
                    stderr=subprocess.PIPE,
                    cwd=Path(__file__).resolve().parents[2],
                )
                for me in range(self.writers)
            ]
            for p in procs:
                _, err = p.communicate(timeout=600)
                if p.returncode:
                    raise RuntimeError(f"a writer failed: {err.decode()[-2000:]}")
        finally:
            self._stop(data)
        log = Log(self.log, self.root)
        self.ready = 1 + max(
            i for i, r in enumerate(log.records) if r.kind == DIRSYNC and r.path == log.root
        )
        return log

    def check(self, log: Log, cut: int, image: Path) -> tuple[int, list[str]]:
        """Start a server on the image (crash recovery), then check what was acknowledged."""
        acked = {
            me: b"".join(d for i, d in log.marks(workers.ack_name("pg", me)) if i < cut)
            .decode()
            .split()
            for me in range(self.writers)
        }
        checked = sum(len(a) for a in acked.values())
        data = image / "data"
        if not (data / "PG_VERSION").exists():
            lost = {me: a for me, a in acked.items() if a}
            return checked, [f"no cluster in the image; acknowledged: {lost}"] if lost else []
        # after a reboot no process of the old server is left; here its pid may be
        # taken by a live process, which PostgreSQL would take for a running server
        (data / "postmaster.pid").unlink(missing_ok=True)
        self._own(image)
        data.chmod(0o700)
        logfile = self.work / "sock" / "recovery.log"
        try:
            dsn = self._start(data, None, logfile)
        except subprocess.CalledProcessError as e:
            said = e.stdout.decode() + e.stderr.decode()
            if logfile.exists():
                said += logfile.read_text()
            return checked, [f"the server does not start: {said[-1500:]}"]
        try:
            return checked, asyncio.run(_check(dsn, acked))
        finally:
            self._stop(data)

    def close(self) -> None:
        """Delete the recorded cluster and its log."""
        shutil.rmtree(self.work, ignore_errors=True)


async def _migrate(dsn: str) -> None:
    store = await PostgresStore.open(dsn)
    await store.close()


async def _check(dsn: str, acked: dict[int, list[str]]) -> list[str]:
    problems: list[str] = []
    try:
        store = await PostgresStore.open(dsn)  # as a restarted service: migrations finish
    except AgentledgerError as e:
        return [f"reopen failed: {e!r}"]
    try:
        for me, done in acked.items():
            present: set[str] = set()
            cursor = ""
            try:
                while True:
                    page = await store.list_run_records(f"w{me}-run", cursor=cursor)
                    present |= {r.event_key for r in page.records if r.event_key[:1] == "n"}
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except AgentledgerError:
                pass
            gone = {f"n{i}" for i in done} - present
            if gone:
                problems.append(f"writer {me}: acknowledged, gone: {sorted(gone)}")
    finally:
        await store.close()
    problems += [f"check: {p}" for p in await check_invariants(dsn)]
    return problems
