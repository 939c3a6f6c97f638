"""The recorder and the replay model: what a cut keeps and drops, on small real programs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.durability.image import Log, preload_env


def _recorded(recorder: Path, tmp_path: Path, program: str) -> Log:
    root = tmp_path / "root"
    root.mkdir()
    log = tmp_path / "log"
    code = textwrap.dedent(program)
    env = preload_env(recorder, root, log)
    subprocess.run([sys.executable, "-c", code, str(root)], env=env, check=True)
    return Log(log, root)


def _files(image: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(image)): p.read_bytes() for p in sorted(image.rglob("*")) if p.is_file()
    }


PROGRAM = """
    import os, sys
    root = sys.argv[1]
    def put(name, data, sync):
        fd = os.open(os.path.join(root, name), os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, data)
        if sync:
            os.fsync(fd)
        os.close(fd)
    def sync_dir(d):
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    put("only-data-synced", b"a", True)     # its name is never synced
    os.mkdir(os.path.join(root, "sub"))
    sync_dir(root)                          # now both are named on the disk
    put("sub/tmp", b"new", True)
    os.replace(os.path.join(root, "sub/tmp"), os.path.join(root, "sub/final"))
    sync_dir(os.path.join(root, "sub"))     # the rename is durable
    put("named-not-written", b"lost", False)
    sync_dir(root)                          # the name is durable, the data is not
    put("nothing-synced", b"x", False)
    put("sub/renamed-unsynced", b"y", True)
    os.rename(os.path.join(root, "sub/renamed-unsynced"), os.path.join(root, "sub/z"))
"""


def test_a_cut_keeps_exactly_what_was_synced(recorder: Path, tmp_path: Path) -> None:
    log = _recorded(recorder, tmp_path, PROGRAM)
    log.image(len(log), tmp_path / "end", "synced")
    assert _files(tmp_path / "end") == {
        "only-data-synced": b"a",
        "sub/final": b"new",
        "named-not-written": b"",
    }


def test_a_cut_before_the_directory_sync_loses_the_new_name(recorder: Path, tmp_path: Path) -> None:
    log = _recorded(recorder, tmp_path, PROGRAM)
    first_dir_sync = next(i for i, r in enumerate(log.records) if r.kind == 10)
    log.image(first_dir_sync, tmp_path / "early", "synced")
    assert _files(tmp_path / "early") == {}


def test_the_subset_mode_keeps_some_unsynced_changes(recorder: Path, tmp_path: Path) -> None:
    log = _recorded(recorder, tmp_path, PROGRAM)
    seen: set[str] = set()
    for seed in range(20):
        out = tmp_path / f"s{seed}"
        counts = log.image(len(log), out, "subset", seed=seed)
        assert counts["unsynced"] > 0
        files = _files(out)
        assert files["sub/final"] == b"new"  # synced things are always there
        seen |= set(files)
    assert {"nothing-synced", "sub/z", "sub/renamed-unsynced"} & seen
