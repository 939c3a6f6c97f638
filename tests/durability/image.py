"""What a disk holds after power is cut: replay a prefix of the recorder's log.

``recorder.c`` (LD_PRELOAD) logs every change made under a root directory, in
one order across processes. Cutting the power after record ``k`` leaves:

- ``"synced"`` mode: only what a sync made durable before ``k``: a file's data
  and truncations up to its last ``fsync``/``fdatasync``; a directory entry
  (create, link, rename, unlink, mkdir) only once its directory was fsynced
  afterwards (a rename: both directories); everything after ``sync()``.
- ``"subset"`` mode: that, plus a seeded random subset of the unsynced changes
  (each kept with probability one half, applied in their order), in the
  spirit of LazyFS and CrashMonkey: a disk may have written back any of them.

A write is kept or lost whole (no torn sectors). Files are identified by inode
and generation (a re-created inode is a new file), directories by path.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["Log", "Mode", "build_recorder", "preload_env"]

Mode = Literal["synced", "subset"]

_HEADER = struct.Struct("<IIIIIIQQQ")
_MAGIC = 0x50574C31
(WRITE, TRUNC, CREATE, LINK, RENAME, UNLINK, MKDIR, RMDIR, FSYNC, DIRSYNC, SYNCALL, EXTEND) = range(
    1, 13
)
_NAMES = (CREATE, LINK, RENAME, UNLINK, MKDIR, RMDIR)


def build_recorder(out_dir: Path) -> Path:
    """Compile recorder.c with gcc into ``out_dir``; the shared library's path."""
    source = Path(__file__).with_name("recorder.c")
    library = out_dir / "recorder.so"
    flags = ["-shared", "-fPIC", "-O1", "-Wall", "-Wno-format-truncation", "-o", str(library)]
    subprocess.run(["gcc", *flags, str(source), "-ldl", "-lpthread"], check=True)
    return library


def preload_env(library: Path, root: Path, log: Path) -> dict[str, str]:
    """The environment of a process whose writes under ``root`` go to ``log``."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = str(library)
    env["AGENTLEDGER_POWER_ROOT"] = os.path.realpath(root)
    env["AGENTLEDGER_POWER_LOG"] = str(log)
    return env


@dataclass
class Record:
    """One logged change."""

    kind: int
    ino: int
    offset: int
    path: str
    path2: str
    data: bytes


@dataclass
class _File:
    ops: list[tuple[int, Record]] = field(default_factory=list)  # (log index, WRITE/TRUNC)
    syncs: list[int] = field(default_factory=list)  # log indexes of its fsyncs


class Log:
    """The parsed log of one run under ``root``, which was empty when the run began."""

    def __init__(self, log: Path, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.records = _parse(log.read_bytes())

    def __len__(self) -> int:
        return len(self.records)

    def marks(self, name: str) -> list[tuple[int, bytes]]:
        """(index, bytes) of each write to the file ``name`` (relative): the acknowledgements."""
        where = os.path.join(self.root, name)
        found: list[tuple[int, bytes]] = []
        names: dict[int, str] = {}
        for i, r in enumerate(self.records):
            if r.kind == CREATE:
                names[r.ino] = r.path
            elif r.kind == WRITE and names.get(r.ino) == where:
                found.append((i, r.data))
        return found

    def image(
        self, cut: int, out: Path, mode: Mode, seed: int = 0, *, fsync_names_file: bool = False
    ) -> dict[str, int]:
        """Write to ``out`` what the root holds after power is lost after ``cut`` records.

        ``fsync_names_file``: an fsync of a new file also makes its name durable,
        as ext4 and XFS do (POSIX does not promise it; PostgreSQL relies on it).
        Returns counts: records replayed, unsynced changes, unsynced kept.
        """
        rng = random.Random(seed)
        records = self.records[:cut]
        sync_all = max((i for i, r in enumerate(records) if r.kind == SYNCALL), default=-1)
        files: dict[tuple[int, int], _File] = {}
        generation: dict[int, int] = {}
        live: dict[str, tuple[int, int]] = {}  # every name change applied: which file a name is
        created: dict[int, tuple[int, int] | None] = {}  # CREATE index -> new file (or None)
        dir_syncs: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            key = (r.ino, generation.get(r.ino, 0))
            if r.kind == CREATE:
                if r.path in live and live[r.path][0] == r.ino:  # a racing O_CREAT: same file
                    created[i] = None
                    continue
                generation[r.ino] = key[1] + 1
                key = (r.ino, key[1] + 1)
                files[key] = _File()
                live[r.path] = created[i] = key
            elif r.kind in (WRITE, TRUNC, EXTEND):
                files.setdefault(key, _File()).ops.append((i, r))
            elif r.kind == FSYNC:
                files.setdefault(key, _File()).syncs.append(i)
            elif r.kind == DIRSYNC:
                dir_syncs.setdefault(r.path, []).append(i)
            elif r.kind == RENAME and r.path in live:
                live[r.path2] = live.pop(r.path)
            elif r.kind == LINK and r.path in live:
                live[r.path2] = live[r.path]
            elif r.kind == UNLINK:
                live.pop(r.path, None)
        unsynced = kept = 0

        def durable(i: int, synced: bool) -> bool:
            nonlocal unsynced, kept
            if synced or i < sync_all:
                return True
            unsynced += 1
            keep = mode == "subset" and rng.random() < 0.5
            kept += keep
            return keep

        # names, in log order: which file each name holds on the disk
        names: dict[str, tuple[int, int]] = {}
        dirs: set[str] = {self.root}
        for i, r in enumerate(records):
            if r.kind not in _NAMES or (r.kind == CREATE and created[i] is None):
                continue
            touched = {os.path.dirname(r.path)} | ({os.path.dirname(r.path2)} if r.path2 else set())
            synced = all(any(s > i for s in dir_syncs.get(d, ())) for d in touched)
            if fsync_names_file and r.kind == CREATE:
                synced = synced or any(s > i for s in files[created[i]].syncs)  # type: ignore[index]
            if not durable(i, synced):
                continue
            if r.kind == CREATE:
                names[r.path] = created[i]  # type: ignore[assignment]
            elif r.kind == RENAME and r.path in names:
                names[r.path2] = names.pop(r.path)
            elif r.kind == LINK and r.path in names:
                names[r.path2] = names[r.path]
            elif r.kind == UNLINK:
                names.pop(r.path, None)
            elif r.kind == MKDIR:
                dirs.add(r.path)
            elif r.kind == RMDIR:
                dirs.discard(r.path)
        # contents: each file's kept writes and truncations, in order
        contents: dict[tuple[int, int], bytes] = {}
        for key, f in files.items():
            last_sync = max(f.syncs, default=-1)
            data = bytearray()
            for i, r in f.ops:
                if not durable(i, i < last_sync):
                    continue
                if r.kind == TRUNC:
                    del data[r.offset :]
                    data.extend(bytes(r.offset - len(data)))
                elif r.kind == EXTEND:
                    data.extend(bytes(max(0, r.offset - len(data))))
                else:
                    if len(data) < r.offset:
                        data.extend(bytes(r.offset - len(data)))
                    data[r.offset : r.offset + len(r.data)] = r.data
            contents[key] = bytes(data)
        out.mkdir(parents=True, exist_ok=True)
        for d in sorted(dirs):
            if _reachable(d, dirs, self.root):
                (out / os.path.relpath(d, self.root)).mkdir(parents=True, exist_ok=True)
        for name, key in names.items():
            if _reachable(os.path.dirname(name), dirs, self.root):
                (out / os.path.relpath(name, self.root)).write_bytes(contents.get(key, b""))
        return {"records": len(records), "unsynced": unsynced, "kept": kept}


def _reachable(d: str, dirs: set[str], root: str) -> bool:
    """Whether directory ``d`` and every directory above it up to the root exist."""
    while d != root:
        if d not in dirs:
            return False
        d = os.path.dirname(d)
    return True


def _parse(raw: bytes) -> list[Record]:
    records: list[Record] = []
    at = 0
    while at + _HEADER.size <= len(raw):
        magic, kind, _pid, len1, len2, _pad, ino, offset, datalen = _HEADER.unpack_from(raw, at)
        if magic != _MAGIC:
            sys.exit(f"power-loss log damaged at byte {at}")
        at += _HEADER.size
        path = raw[at : at + len1].decode()
        at += len1
        path2 = raw[at : at + len2].decode()
        at += len2
        data = raw[at : at + datalen]
        at += datalen
        records.append(Record(kind, ino, offset, path, path2, data))
    return records
