"""Power-loss harness: cut the power at many points under real writer processes, then check.

Each scenario runs its writer processes once under the recorder (``recorder.c``,
LD_PRELOAD, compiled here with gcc), which logs every change they make under a
scratch root in one order. A cut at log record ``k`` is a power loss at that
instant: :mod:`.image` builds what the disk would hold (only synced changes, or
those plus a random subset of the unsynced ones), the store or file is opened
there as after a reboot, and what the writers had been told was done (their
acknowledgements before ``k``) is checked against it.

    python -m tests.durability.power_loss --cuts 500          # the full run
    python -m tests.durability.power_loss --cuts 20 --scenario keys --mode subset

Prints, per scenario and mode: cuts made, acknowledged writes checked, violations.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentledger.errors import AgentledgerError, SessionPurgedError
from agentledger.storage.archive import verify_archive
from agentledger.storage.retention import archive_path
from agentledger.storage.sqlite import SQLiteStore, check_invariants
from tests.durability import workers
from tests.durability.image import Log, Mode, build_recorder, preload_env

__all__ = ["SCENARIOS", "Outcome", "Scenario", "main", "run_scenario"]

_REPO = Path(__file__).resolve().parents[2]
ALLOWED = "allowed: "
"""Marks a loss the documentation allows (acknowledged, not yet synced, at ``normal``)."""


_KEY = base64.b64encode(bytes(range(32))).decode()
_KEYRING = f'{{"current": "k1", "keys": {{"k1": "{_KEY}"}}}}'


@dataclass(frozen=True)
class Scenario:
    """Writer processes to record, and the check of one cut's image."""

    kind: str  # the worker kind
    writers: int
    count: int  # calls per writer
    durability: str = "full"  # or the keyring (JSON) of an encrypted store


SCENARIOS: dict[str, Scenario] = {
    "sqlite-full": Scenario("append", writers=3, count=60),
    "sqlite-normal": Scenario("append", writers=3, count=60, durability="normal"),
    "sweep": Scenario("sweep", writers=1, count=8),
    "sealed": Scenario("sealed", writers=2, count=20, durability=_KEYRING),
    "keys": Scenario("keys", writers=1, count=40),
    "tokens": Scenario("tokens", writers=1, count=40),
    "postgres": Scenario("pg", writers=3, count=40),
}


@dataclass
class Outcome:
    """What the cuts of one scenario in one mode found."""

    scenario: str
    mode: Mode
    cuts: int = 0
    checked: int = 0  # acknowledged writes checked, summed over the cuts
    violations: list[str] = field(default_factory=list)
    allowed: int = 0  # cuts that lost acknowledged writes where that is allowed (``normal``)

    def line(self) -> str:
        allowed = f"  cuts with allowed losses {self.allowed}" if self.allowed else ""
        return (
            f"{self.scenario:14} {self.mode:7} cuts {self.cuts:4}  writes checked "
            f"{self.checked:6}  violations {len(self.violations)}{allowed}"
        )


def record(scenario: Scenario, work: Path, library: Path) -> Log:
    """Run the scenario's writers to the end under the recorder; their log."""
    root = work / "root"
    root.mkdir()
    log = work / "log"
    env = preload_env(library, root, log)
    env["PYTHONPATH"] = os.pathsep.join([str(_REPO / "src"), str(_REPO)])
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.durability.workers",
                scenario.kind,
                str(root),
                str(me),
                str(scenario.count),
                scenario.durability,
            ],
            env=env,
            cwd=_REPO,
            stderr=subprocess.PIPE,
        )
        for me in range(scenario.writers)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"a writer failed ({p.returncode}): {err.decode()[-2000:]}")
    return Log(log, root)


def _acks(log: Log, kind: str, me: int, cut: int) -> list[str]:
    """The acknowledgements worker ``me`` had written before record ``cut``."""
    lines = b"".join(data for i, data in log.marks(workers.ack_name(kind, me)) if i < cut)
    return lines.decode().splitlines()


async def _check_appends(
    log: Log, scenario: Scenario, cut: int, image: Path
) -> tuple[int, list[str]]:
    acked = {me: _acks(log, "append", me, cut) for me in range(scenario.writers)}
    checked = sum(len(a) for a in acked.values())
    db = image / workers.DB
    if not db.exists():
        lost = {me: a for me, a in acked.items() if a}
        return checked, [f"the database file is gone; acknowledged: {lost}"] if lost else []
    try:  # reopened as after a reboot (a writer rolls back or recovers), then checked
        store = await SQLiteStore.open(db)
    except AgentledgerError as e:
        return checked, [f"reopen failed: {e!r}"]
    problems = [f"check: {p}" for p in check_invariants(db)]
    try:
        for me, done in acked.items():
            present = await _event_keys(store, f"w{me}-run")
            want = {f"n{i}" for i in done}
            if not want <= present:
                gone = f"writer {me}: acknowledged, gone: {sorted(want - present)}"
                problems.append(gone if scenario.durability == "full" else ALLOWED + gone)
            if present != {f"n{i}" for i in range(len(present))}:
                problems.append(f"writer {me}: not a prefix of its commits: {sorted(present)}")
    finally:
        await store.close()
    return checked, problems


async def _event_keys(store: SQLiteStore, run_id: str) -> set[str]:
    keys: set[str] = set()
    cursor = ""
    try:
        while True:
            page = await store.list_run_records(run_id, cursor=cursor)
            keys |= {r.event_key for r in page.records if r.event_key.startswith("n")}
            cursor = page.next_cursor
            if not cursor:
                return keys
    except AgentledgerError:  # the run (or its session) not there: nothing committed
        return keys


async def _check_sealed(
    log: Log, scenario: Scenario, cut: int, image: Path
) -> tuple[int, list[str]]:
    from agentledger.storage.encryption import Encryption, Keyring

    acked = {me: _acks(log, "sealed", me, cut) for me in range(scenario.writers)}
    checked = sum(len(a) for a in acked.values())
    db = image / workers.DB
    if not db.exists():
        lost = {me: a for me, a in acked.items() if a}
        return checked, [f"the database file is gone; acknowledged: {lost}"] if lost else []
    encryption = Encryption(Keyring.from_json(scenario.durability), image / workers.VAULT)
    try:
        store = await SQLiteStore.open(db, encryption=encryption)
    except AgentledgerError as e:
        return checked, [f"reopen failed: {e!r}"]
    problems = [f"check: {p}" for p in check_invariants(db)]
    try:
        for me, done in acked.items():
            for i in done:
                try:
                    page = await store.list_run_records(f"w{me}-s{i}-run")
                    payloads = [r.payload for r in page.records if r.event_key == "n0"]
                    if payloads != [b'{"i": %d}' % int(i)]:
                        problems.append(f"w{me}-s{i}: acknowledged, gone: {payloads}")
                except AgentledgerError as e:
                    problems.append(f"w{me}-s{i}: acknowledged, unreadable: {e!r}")
    finally:
        await store.close()
    return checked, problems


async def _check_sweep(
    log: Log, scenario: Scenario, cut: int, image: Path
) -> tuple[int, list[str]]:
    acked = {line.split()[0] for line in _acks(log, "sweep", 0, cut)}
    db = image / workers.DB
    if not db.exists():
        return len(acked), [f"the database is gone; purges acknowledged: {sorted(acked)}"] * bool(
            acked
        )
    async with await SQLiteStore.open(db) as store:
        problems = [f"check: {p}" for p in check_invariants(db)]
        candidates = [f"p0-s{n}" for n in range(scenario.count)]
        for sid in candidates:
            try:
                await store.load_session(sid)
                purged = False
            except SessionPurgedError:
                purged = True
            except AgentledgerError:
                purged = False
            if sid in acked and not purged:
                problems.append(f"{sid}: a purge receipt was given but the session is not purged")
            if not purged:
                continue
            receipt = await store.purge_session(sid)  # a purged session answers its receipt
            name = archive_path(workers.ARCHIVES, sid)
            if not (image / name).is_file():
                found = (image / workers.ARCHIVES).is_dir()
                there = "is empty" if found else "is missing"
                problems.append(
                    f"{sid}: purged, but its archive {name} is missing; its directory {there}"
                )
                continue
            try:
                manifest = await verify_archive(image / name)
            except AgentledgerError as e:
                problems.append(f"{sid}: purged, but its archive is torn: {e}")
                continue
            if manifest.session_digest != receipt.digest:
                problems.append(f"{sid}: the archive's digest is not the purge receipt's")
    return len(acked), problems


async def _check_keys(log: Log, scenario: Scenario, cut: int, image: Path) -> tuple[int, list[str]]:
    from agentledger.storage.encryption import Keyring

    acked = _acks(log, "keys", 0, cut)
    path = image / workers.KEYRING
    if not path.exists():
        return len(acked), [f"the keyring is gone; keys added: {acked}"] if acked else []
    try:
        ring = Keyring.from_file(path)
    except AgentledgerError as e:
        return len(acked), [f"the keyring does not load: {e}"]
    lost = [k for k in acked if k not in ring.ids]
    return len(acked), [f"keys added, then gone: {lost}"] if lost else []


async def _check_tokens(
    log: Log, scenario: Scenario, cut: int, image: Path
) -> tuple[int, list[str]]:
    from agentledger.service.auth import TokenTable

    acked = _acks(log, "tokens", 0, cut)
    path = image / workers.TOKENS
    if not path.exists():
        return len(acked), [f"the token file is gone; {len(acked)} tokens given"] if acked else []
    try:
        table = TokenTable.load(path)
    except AgentledgerError as e:
        return len(acked), [f"the token file does not load: {e}"]
    lost = 0
    for token in acked:
        try:
            table.authenticate(f"Bearer {token}", "check")
        except AgentledgerError:
            lost += 1
    return len(acked), [f"{lost} of {len(acked)} tokens given, then gone"] if lost else []


_CHECKS: dict[str, Callable[[Log, Scenario, int, Path], object]] = {
    "append": _check_appends,
    "sweep": _check_sweep,
    "sealed": _check_sealed,
    "keys": _check_keys,
    "tokens": _check_tokens,
}


def cut_points(
    log: Log, scenario: Scenario, cuts: int, rng: random.Random, start: int = 0
) -> list[int]:
    """Where to cut (from record ``start`` on): half at random records, half just after an
    acknowledgement (the instant the most is promised), and always at the very end."""
    acks = [
        i + 1
        for me in range(scenario.writers)
        for i, _ in log.marks(workers.ack_name(scenario.kind, me))
    ]
    points = {len(log)}
    while len(points) < min(cuts, len(log) + 1 - start):
        points.add(
            rng.choice(acks) if acks and rng.random() < 0.5 else rng.randint(start, len(log))
        )
    return sorted(points)


def run_scenario(
    name: str,
    modes: list[Mode],
    cuts: int,
    seed: int,
    work: Path,
    library: Path,
    count: int | None = None,
    writers: int | None = None,
) -> list[Outcome]:
    """Record scenario ``name`` once (``count`` calls per writer, ``writers`` processes,
    if given) and check ``cuts`` cuts in each mode."""
    scenario = SCENARIOS[name]
    if count is not None:
        scenario = replace(scenario, count=count)
    if writers is not None:
        scenario = replace(scenario, writers=writers)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    if scenario.kind == "pg":
        from tests.durability.postgres import PostgresRun

        cluster = PostgresRun(library, scenario.writers, scenario.count)
        try:
            log = cluster.record()
            return _cuts(
                name, scenario, log, cluster.check, modes, cuts, seed, cluster.work, cluster.ready
            )
        finally:
            cluster.close()
            shutil.rmtree(run_dir)
    log = record(scenario, run_dir, library)
    check = _CHECKS[scenario.kind]

    def check_sync(log: Log, cut: int, image: Path) -> tuple[int, list[str]]:
        return asyncio.run(check(log, scenario, cut, image))  # type: ignore[arg-type]

    try:
        return _cuts(name, scenario, log, check_sync, modes, cuts, seed, run_dir)
    finally:
        shutil.rmtree(run_dir)


def _cuts(
    name: str,
    scenario: Scenario,
    log: Log,
    check: Callable[[Log, int, Path], tuple[int, list[str]]],
    modes: list[Mode],
    cuts: int,
    seed: int,
    run_dir: Path,
    start: int = 0,
) -> list[Outcome]:
    outcomes = []
    for mode in modes:
        rng = random.Random(f"{seed}-{name}-{mode}")
        outcome = Outcome(name, mode)
        for cut in cut_points(log, scenario, cuts, rng, start):
            image = run_dir / f"cut-{mode}-{cut}"
            log.image(
                cut, image, mode, seed=rng.randrange(2**32), fsync_names_file=scenario.kind == "pg"
            )
            checked, problems = check(log, cut, image)
            outcome.cuts += 1
            outcome.checked += checked
            allowed = [p for p in problems if p.startswith(ALLOWED)]
            outcome.allowed += bool(allowed)
            outcome.violations += [
                f"cut {cut}/{len(log)} ({mode}): {p}" for p in problems if p not in allowed
            ]
            shutil.rmtree(image)
        outcomes.append(outcome)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    """Run the harness; exit status 1 if any cut found a violation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", type=int, default=100, help="cuts per scenario and mode")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--mode", action="append", choices=["synced", "subset"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    total_violations = 0
    with tempfile.TemporaryDirectory(prefix="power-loss-") as tmp:
        work = Path(tmp)
        library = build_recorder(work)
        for name in args.scenario or list(SCENARIOS):
            for outcome in run_scenario(
                name, args.mode or ["synced", "subset"], args.cuts, args.seed, work, library
            ):
                print(outcome.line(), flush=True)
                for v in outcome.violations[:5]:
                    print(f"    {v}")
                total_violations += len(outcome.violations)
    print(f"violations: {total_violations}")
    return 1 if total_violations else 0


if __name__ == "__main__":
    sys.exit(main())
