"""Times in the service's JSON are written as the CLI writes them: UTC with milliseconds
and ``Z`` (``2026-12-03T07:07:42.559Z``), in call answers and follow events alike, whether
the time has a fraction or none; the OpenAPI document says so on every time field."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import httpx

from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.payloads import TRANSCRIPT_APPENDED
from agentledger.storage.types import RunStatus
from agentledger.transcript import Message, TextPart, encode_messages
from tests.service.process import ServiceProcess, Tokens

MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
WHOLE = datetime(2026, 12, 3, 7, 7, 42, tzinfo=UTC)  # no fraction: msgspec would write ":42Z"
SOME = datetime(2026, 12, 3, 7, 7, 43, 559000, tzinfo=UTC)  # msgspec would write ".559000Z"


async def test_answers_and_follow_events_write_times_in_milliseconds(
    sqlite_service: ServiceProcess, tokens: Tokens
) -> None:
    from agentledger.service import StoreClient

    client = await StoreClient.open(sqlite_service.url, token=tokens.host)
    try:
        await client.create_session("times-1", created_at=WHOLE)
        run = RecordBuilder(RunStart(run_id="times-run", agent_id="a", session_id="times-1",
                                     started_at=SOME))  # fmt: skip
        await client.start_root_run(run.root_start())
        said = encode_messages([Message(role="user", parts=(TextPart(text="hi"),))])
        await client.append_run_record(
            run.record(TRANSCRIPT_APPENDED, said, event_key="m1", at=SOME)
        )
        await client.record_run_terminal(run.terminal(RunStatus.COMPLETED, at=SOME))
    finally:
        await client.close()
    headers = {"Authorization": f"Bearer {tokens.reader}"}
    async with httpx.AsyncClient(base_url=sqlite_service.url, headers=headers) as http:

        async def call(method: str, **body: object) -> object:
            answer = await http.post(f"/v1/{method}", json=body)
            assert answer.status_code == 200, answer.text
            return json.loads(answer.content)

        session = await call("load_session", session_id="times-1")
        assert session["created_at"] == "2026-12-03T07:07:42.000Z"  # type: ignore[index]
        (meta,) = await call("list_runs_by_session", session_id="times-1")  # type: ignore[misc]
        assert meta["started_at"] == "2026-12-03T07:07:43.559Z"
        assert MS.fullmatch(meta["updated_at"]), meta
        page = await call("list_run_records", run_id="times-run")
        stamps = [r["timestamp"] for r in page["records"]]  # type: ignore[index]
        assert stamps == ["2026-12-03T07:07:43.559Z"] * 3, stamps
        data: list[str] = []
        async with http.stream("GET", "/v1/runs/times-run/records") as events:
            async for line in events.aiter_lines():  # the stream stays open: read what is there
                if line.startswith("data: "):
                    data.append(line.removeprefix("data: "))
                if len(data) == len(stamps):
                    break
        assert [json.loads(d)["timestamp"] for d in data] == stamps


def test_the_openapi_document_says_how_times_are_written(sqlite_service: ServiceProcess) -> None:
    document = httpx.get(f"{sqlite_service.url}/openapi.json").json()
    assert "UTC with milliseconds and Z" in document["info"]["description"]
    schemas = document["components"]["schemas"]
    for struct, field in (("Session", "created_at"), ("Session", "ended_at"),
                          ("RunMeta", "started_at"), ("Record", "timestamp")):  # fmt: skip
        prop = schemas[struct]["properties"][field]
        assert prop["description"] == (
            "in answers: UTC with milliseconds and Z (2026-12-03T07:07:42.559Z)"
        ), (struct, field)
        assert "date-time" in json.dumps(prop)
