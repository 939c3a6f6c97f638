"""A service enforces its own payload and checkpoint caps (``agentledger serve --max-*``).

A StoreClient that knows the caps refuses before sending; one that does not
hears the service's typed refusal. A request body past what the caps allow is a
typed ValidationError too, not a bare HTTP 413.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import msgspec
import pytest

from agentledger.errors import CorruptArchiveError, ValidationError
from agentledger.service import StoreClient
from agentledger.service.app import body_cap
from agentledger.service.error_codec import decode_error
from agentledger.service.wire import MAX_ENTRIES
from agentledger.storage import Checkpoint, RecordBuilder, RunStart
from agentledger.storage.archive import ArchiveManifest
from agentledger.storage.validation import SizeLimits
from tests.service.process import ServiceProcess, Tokens, free_port

SMALL = SizeLimits(max_payload_bytes=256, max_checkpoint_bytes=64)
AT = datetime(2026, 7, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def capped_service(
    tmp_path_factory: pytest.TempPathFactory, tokens: Tokens
) -> Iterator[ServiceProcess]:
    db = tmp_path_factory.mktemp("capped") / "store.db"
    options = ("--max-payload-bytes", "256", "--max-checkpoint-bytes", "64")
    with ServiceProcess(str(db), tokens.path, options=options) as service:
        yield service


def _run(name: str) -> RecordBuilder:
    return RecordBuilder(
        RunStart(run_id=name, agent_id="a", session_id="s", parent_run_id="",
                 predecessor_run_id="", started_at=AT, labels={})
    )  # fmt: skip


async def test_the_service_refuses_what_its_caps_exclude(
    capped_service: ServiceProcess, tokens: Tokens
) -> None:
    run = _run("r")
    at = AT + timedelta(seconds=1)
    over = run.record("planner_note", b'"' + b"x" * 255 + b'"', event_key="over", at=at)
    fits = run.record("planner_note", b'"' + b"x" * 254 + b'"', event_key="fits", at=at)
    async with StoreClient(capped_service.url, token=tokens.host) as client:
        await client.create_session("s", created_at=AT)
        await client.start_root_run(run.root_start())
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await client.append_run_record(over)
        assert (caught.value.field, caught.value.got) == ("record.payload", "257 bytes")
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await client.append_run_records([fits, over])
        assert caught.value.field == "records[1].payload"
        checkpoint = Checkpoint(id="cp", data=b"\x00" * 65)
        with pytest.raises(ValidationError, match="at most 64 bytes"):
            await client.record_run_suspension(run.suspension(checkpoint, at=at))
        # A body past what the caps allow is refused as typed, whatever it holds.
        many = [
            run.record("planner_note", b'"' + b"x" * 200 + b'"', event_key=f"k{i}", at=at)
            for i in range(body_cap(SMALL) // 250)
        ]
        with pytest.raises(ValidationError, match="this service's limit") as caught:
            await client.append_run_records(many)
        assert caught.value.field == "body"
        listed = (await client.list_run_records("r")).records
        assert [r.event_key for r in listed] == ["run_started"]
        assert (await client.append_run_record(fits)).inserted


async def test_a_client_that_knows_the_caps_refuses_before_sending() -> None:
    """Nothing listens at the URL: only a refusal made here can be a ValidationError."""
    run = _run("r")
    over = run.record("planner_note", b'"' + b"x" * 255 + b'"', event_key="over", at=AT)
    url = f"http://127.0.0.1:{free_port()}"
    async with StoreClient(url, token="unused", limits=SMALL) as client:
        with pytest.raises(ValidationError, match="at most 256 bytes"):
            await client.append_run_record(over)
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await client.append_run_records([over])
        assert caught.value.field == "records[0].payload"
        checkpoint = Checkpoint(id="cp", data=b"\x00" * 65)
        with pytest.raises(ValidationError, match="at most 64 bytes"):
            await client.record_run_suspension(run.suspension(checkpoint, at=AT))
        carrying = msgspec.structs.replace(run.root_start(), records=(over,))
        with pytest.raises(ValidationError, match="at most 256 bytes") as caught:
            await client.start_root_run(carrying)
        assert caught.value.field == "records[0].payload"


def test_serve_defaults_are_the_stores_defaults() -> None:
    """``agentledger serve`` repeats the defaults (its --help imports no store)."""
    from agentledger.cli.service import serve

    defaults = {p.name: p.default for p in serve.params}
    assert defaults["max_payload_bytes"] == SizeLimits().max_payload_bytes
    assert defaults["max_checkpoint_bytes"] == SizeLimits().max_checkpoint_bytes


def hostile_archive(inflated: int, claimed: int) -> bytes:
    """A valid-looking archive whose body inflates to ``inflated`` bytes, claiming more: a
    session image whose first value says it is ``inflated`` bytes long, then zeros."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    manifest = ArchiveManifest(
        format_version=1, session_id="bomb", labels={}, session_created_at=at,
        session_ended_at=at, runs=0, records=0, checkpoints=0, byte_total=claimed,
        run_digests={}, session_digest="sha256:" + "0" * 64, compression="zlib", created_at=at,
    )  # fmt: skip
    deflate = zlib.compressobj(9)
    body = deflate.compress(b"\x84\xa7session\xc6" + inflated.to_bytes(4, "big"))
    body += b"".join(deflate.compress(bytes(1 << 20)) for _ in range(inflated >> 20))
    content = b"agentledger-archive 1\n" + msgspec.json.encode(manifest) + b"\n"
    content += body + deflate.flush()
    return content + b"sha256:" + hashlib.sha256(content).hexdigest().encode() + b"\n"


async def test_an_archive_inflates_no_further_than_the_services_caps(
    capped_service: ServiceProcess, tokens: Tokens
) -> None:
    """A small archive claiming 1 GiB is refused once it passes the body cap, not its claim."""
    bomb = hostile_archive(8 << 20, 1 << 30)
    assert len(bomb) < body_cap(SMALL)
    async with StoreClient(capped_service.url, token=tokens.host) as client:
        with pytest.raises(CorruptArchiveError) as caught:
            await client.import_archive(bomb)
    assert f"inflates past {body_cap(SMALL)} bytes, which the limit is" in caught.value.reason


async def test_a_request_carries_a_bounded_number_of_records(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    """Each decoded record costs far more than its bytes: a body is counted before decoding."""
    run = _run("many")
    one = msgspec.json.encode(run.record("n", b"1", event_key="k0000000", at=AT))
    records = b",".join(one.replace(b"k0000000", b"k%07d" % i) for i in range(MAX_ENTRIES + 1))
    headers = {"Authorization": f"Bearer {tokens.host}"}
    async with httpx.AsyncClient(base_url=sqlite_service.url, timeout=120) as http:
        answer = await http.post("/v1/append_run_records", headers=headers,
                                 content=b'{"records":[' + records + b"]}")  # fmt: skip
    error = decode_error(answer.content)
    assert isinstance(error, ValidationError), answer.text[:300]
    assert (error.field, error.got) == ("records", f"{MAX_ENTRIES + 1} records and runs")
