"""An archive sent to the service costs it a bounded amount of memory, whatever it claims.

The body is inflated and decoded a page at a time, so a decompression bomb
(a 300 KB file whose body inflates to 300 MiB) is refused having held a page,
not the service's whole inflation cap (over 100 MiB). Measured as the real
service process's peak resident memory (``VmHWM``), a fresh process for the test.
"""

from __future__ import annotations

import hashlib
import zlib
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from agentledger.errors import CorruptArchiveError
from agentledger.service import StoreClient
from agentledger.service.app import body_cap
from agentledger.storage.archive import ArchiveManifest
from agentledger.storage.validation import DEFAULT_LIMITS
from tests.service.process import ServiceProcess, Tokens

MIB = 1 << 20
BOMB = 300 * MIB
ABOVE_IDLE = 16 * MIB
"""The most one refused bomb may raise the service's peak memory."""


def _bomb(inflated: int, prefix: bytes = b"") -> bytes:
    """An archive claiming 1 GiB whose body inflates to ``prefix`` then zeros, ``inflated``
    bytes in all, its checksum valid."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    manifest = ArchiveManifest(
        format_version=1, session_id="bomb", labels={}, session_created_at=at,
        session_ended_at=at, runs=0, records=0, checkpoints=0, byte_total=1 << 30,
        run_digests={}, session_digest="sha256:" + "0" * 64, compression="zlib", created_at=at,
    )  # fmt: skip
    deflate = zlib.compressobj(9)
    body = deflate.compress(prefix)
    body += b"".join(deflate.compress(bytes(MIB)) for _ in range(inflated // MIB))
    content = b"agentledger-archive 1\n" + msgspec.json.encode(manifest) + b"\n"
    content += body + deflate.flush()
    return content + b"sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n"


def _peak(pid: int) -> int:
    """The process's peak resident memory so far, in bytes (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
async def test_a_decompression_bomb_costs_the_service_a_bounded_amount_of_memory(
    tmp_path: Path, tokens: Tokens
) -> None:
    zeros = _bomb(BOMB)
    claims = _bomb(BOMB, b"\x84\xa7session\xc6" + BOMB.to_bytes(4, "big"))  # a 300 MiB value
    assert len(zeros) < 400 * 1024  # a 300 KB request
    assert body_cap(DEFAULT_LIMITS) > 100 * MIB  # what the service would hold before
    with ServiceProcess(str(tmp_path / "store.db"), tokens.path) as service:
        async with StoreClient(service.url, token=tokens.host) as client:
            with pytest.raises(CorruptArchiveError):  # warms the route: its code is loaded
                await client.import_archive(_bomb(MIB))
            idle = _peak(service.pid)
            with pytest.raises(CorruptArchiveError) as zero:
                await client.import_archive(zeros)
            assert "unreadable contents" in zero.value.reason
            with pytest.raises(CorruptArchiveError) as claim:
                await client.import_archive(claims)
            assert "inflates past" in claim.value.reason
            assert await client.list_sessions() is not None  # it still answers
            grown = _peak(service.pid) - idle
    assert grown <= ABOVE_IDLE, f"the bombs raised the service's peak memory {grown >> 20} MiB"
