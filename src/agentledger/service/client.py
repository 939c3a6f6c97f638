"""StoreClient: ``Store`` and ``SessionAdmin`` over HTTP, for workers and hosts elsewhere [S2].

Each method is one ``POST`` to the store service, with pooled keep-alive
connections (httpx). Results and typed errors are those of the backend
behind the service, class and fields alike. Transport failures (refused,
reset, timeout, a 5xx without a typed error) are
:class:`~agentledger.errors.TransientError` [S3]: an exact retry is safe,
because the store answers it with the original ids [X1].
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from agentledger.errors import (
    AgentledgerError,
    StoreClosedError,
    TransientError,
    ValidationError,
)
from agentledger.observability.propagation import inject_trace_context
from agentledger.service import wire
from agentledger.service.carriage import check_carriable
from agentledger.service.error_codec import decode_error
from agentledger.storage import lifecycle
from agentledger.storage.archive import ArchiveManifest
from agentledger.storage.protocol import DEFAULT_PAGE_LIMIT
from agentledger.storage.session_image import SessionImage
from agentledger.storage.types import (
    AppendResult,
    Checkpoint,
    ChildRunStart,
    OneShotChildRunStart,
    OneShotRunStart,
    Page,
    PurgeReceipt,
    Record,
    RepairResult,
    RootRunStart,
    RunCancellation,
    RunMeta,
    RunStatus,
    RunSuspension,
    RunTerminal,
    Session,
    SessionPage,
    SessionStatus,
    StartResult,
    TranscriptSegment,
)
from agentledger.storage.validation import SizeLimits, require_id

__all__ = ["FollowedRecord", "StoreClient"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_ENCODER = msgspec.json.Encoder()
_TOKEN_ENV = "AGENTLEDGER_TOKEN"


class FollowedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A record seen while following, and the cursor that resumes just after it."""

    record: Record
    cursor: str


def _labels(labels: Any) -> Any:
    """Labels as sent: any mapping as a dict; anything else as given, for the check to refuse."""
    return dict(labels) if isinstance(labels, Mapping) else labels


def _statuses(statuses: Iterable[Any]) -> list[str] | str:
    """A status filter as sent: the store, not the client, refuses unknown ones."""
    if isinstance(statuses, str):
        return statuses
    return [s.value if isinstance(s, RunStatus | SessionStatus) else s for s in statuses]


class StoreClient:
    """A ``Store`` and ``SessionAdmin`` served by ``agentledger serve`` at ``url``.

    Args:
        url: the service, e.g. ``http://127.0.0.1:8470``.
        token: the bearer token; defaults to ``$AGENTLEDGER_TOKEN``.
        timeout: seconds a call may take before it is a ``TransientError``.
        max_connections: connections kept in the pool (keep-alive).
        limits: the service's payload and checkpoint caps, if known: a write
            over them is refused here, before sending, as the service would
            refuse it (without them, the service refuses).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        max_connections: int = 64,
        limits: SizeLimits | None = None,
    ) -> None:
        token = os.environ.get(_TOKEN_ENV, "") if token is None else token
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self.url = url.rstrip("/")
        self.limits = limits
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            event_hooks={"request": [inject_trace_context]},  # W3C traceparent [DESIGN 14]
        )
        self._closed = False

    async def close(self) -> None:
        """Close the pooled connections; closing twice is a no-op, later calls fail with
        ``StoreClosedError`` as on every backend."""
        self._closed = True
        await self._http.aclose()

    async def __aenter__(self) -> StoreClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: wire.Method[Req, Resp], request: Req) -> Resp:
        if self._closed:
            raise StoreClosedError(backend="service", operation=method.name)
        if self.limits is not None and method.writes:
            lifecycle.check_sizes(request, self.limits)
        check_carriable(request, method.request, method.prefix)
        try:
            body = _ENCODER.encode(request)
        except (TypeError, msgspec.EncodeError) as e:
            raise ValidationError(
                field=method.name,
                expected="a call the wire can carry (plain JSON values)",
                got=str(e),
                message=f"{method.name}: the call cannot be encoded: {e}",
            ) from e
        try:
            response = await self._http.post(method.route, content=body)
        except httpx.RequestError as e:  # refused, reset, timed out, cut short
            raise TransientError(f"{type(e).__name__}: {e}", operation=method.name) from e
        if response.status_code != 200:
            raise _refusal(method.name, response)
        try:
            return method.response_decoder.decode(response.content)
        except msgspec.DecodeError as e:  # not an agentledger service of this version
            raise ValidationError(
                field=f"{method.name} answer",
                expected=f"an answer of this agentledger version from {self.url}",
                got=str(e),
                message=f"{method.name}: unexpected answer from {self.url}: {e}",
            ) from e

    # ------------------------------------------------------------ Store

    async def start_root_run(self, cmd: RootRunStart, /) -> StartResult:
        return await self._call(wire.START_ROOT_RUN, cmd)

    async def start_child_run(self, cmd: ChildRunStart, /) -> StartResult:
        return await self._call(wire.START_CHILD_RUN, cmd)

    async def start_one_shot_run(self, cmd: OneShotRunStart, /) -> StartResult:
        return await self._call(wire.START_ONE_SHOT_RUN, cmd)

    async def start_one_shot_child_run(self, cmd: OneShotChildRunStart, /) -> StartResult:
        return await self._call(wire.START_ONE_SHOT_CHILD_RUN, cmd)

    async def append_run_record(self, record: Record, /) -> AppendResult:
        return await self._call(wire.APPEND_RUN_RECORD, record)

    async def append_run_records(self, records: Sequence[Record], /) -> list[AppendResult]:
        batch = lifecycle.check_batch(records, self.limits)  # refused as the store refuses it
        return await self._call(wire.APPEND_RUN_RECORDS, wire.RecordBatch(records=batch))

    async def record_run_cancellation(self, cmd: RunCancellation, /) -> AppendResult:
        return await self._call(wire.RECORD_RUN_CANCELLATION, cmd)

    async def record_run_suspension(self, cmd: RunSuspension, /) -> AppendResult:
        return await self._call(wire.RECORD_RUN_SUSPENSION, cmd)

    async def record_run_terminal(self, cmd: RunTerminal, /) -> AppendResult:
        return await self._call(wire.RECORD_RUN_TERMINAL, cmd)

    async def repair_run_suspension(self, cmd: RunSuspension, /) -> RepairResult:
        return await self._call(wire.REPAIR_RUN_SUSPENSION, cmd)

    async def repair_run_terminal(self, cmd: RunTerminal, /) -> RepairResult:
        return await self._call(wire.REPAIR_RUN_TERMINAL, cmd)

    async def save_tool_result(self, run_id: str, call_key: str, data: bytes, /) -> bytes:
        lifecycle.check_tool_result(run_id, call_key, data, self.limits)
        save = wire.ToolResultSave(run_id=run_id, call_key=call_key, data=data)
        return await self._call(wire.SAVE_TOOL_RESULT, save)

    async def load_tool_result(self, run_id: str, call_key: str, /) -> bytes | None:
        require_id("run_id", run_id)
        require_id("call_key", call_key)
        ref = wire.ToolResultRef(run_id=run_id, call_key=call_key)
        return await self._call(wire.LOAD_TOOL_RESULT, ref)

    async def load_run(self, run_id: str, /) -> RunMeta:
        return await self._call(wire.LOAD_RUN, wire.RunRef(run_id=run_id))

    async def load_session_status(self, session_id: str, /) -> SessionStatus:
        return await self._call(wire.LOAD_SESSION_STATUS, wire.SessionRef(session_id=session_id))

    async def load_run_suspension(self, run_id: str, /) -> Checkpoint:
        return await self._call(wire.LOAD_RUN_SUSPENSION, wire.RunRef(run_id=run_id))

    async def load_transcript_chain(self, run_id: str, /) -> tuple[TranscriptSegment, ...]:
        return await self._call(wire.LOAD_TRANSCRIPT_CHAIN, wire.RunRef(run_id=run_id))

    async def list_run_records(
        self, run_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Page:
        query = wire.RunPageQuery(run_id=run_id, cursor=cursor, limit=limit)
        return await self._call(wire.LIST_RUN_RECORDS, query)

    async def list_session_run_records(
        self, session_id: str, /, cursor: str = "", limit: int = DEFAULT_PAGE_LIMIT
    ) -> Page:
        query = wire.SessionPageQuery(session_id=session_id, cursor=cursor, limit=limit)
        return await self._call(wire.LIST_SESSION_RUN_RECORDS, query)

    # ----------------------------------------------------- SessionAdmin

    async def create_session(
        self,
        session_id: str,
        /,
        created_at: datetime | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Session:
        call = wire.SessionCreate(session_id=session_id, created_at=created_at,
                                  labels=_labels(labels))  # fmt: skip
        return await self._call(wire.CREATE_SESSION, call)

    async def load_session(self, session_id: str, /) -> Session:
        return await self._call(wire.LOAD_SESSION, wire.SessionRef(session_id=session_id))

    async def end_session(self, session_id: str, /, ended_at: datetime) -> Session:
        call = wire.SessionEnd(session_id=session_id, ended_at=ended_at)
        return await self._call(wire.END_SESSION, call)

    async def purge_session(self, session_id: str, /, expected_digest: str = "") -> PurgeReceipt:
        call = wire.SessionPurge(session_id=session_id, expected_digest=expected_digest)
        return await self._call(wire.PURGE_SESSION, call)

    async def import_session(self, image: SessionImage, /) -> None:
        await self._call(wire.IMPORT_SESSION, image)

    async def list_runs_by_session(
        self, session_id: str, /, statuses: Iterable[RunStatus] = ()
    ) -> list[RunMeta]:
        query = wire.RunsBySessionQuery(session_id=session_id, statuses=_statuses(statuses))
        return await self._call(wire.LIST_RUNS_BY_SESSION, query)

    async def list_sessions(
        self,
        statuses: Iterable[SessionStatus] = (),
        labels: Mapping[str, str] | None = None,
        cursor: str = "",
        limit: int = DEFAULT_PAGE_LIMIT,
    ) -> SessionPage:
        query = wire.SessionsQuery(
            statuses=_statuses(statuses), labels=_labels(labels), cursor=cursor, limit=limit
        )
        return await self._call(wire.LIST_SESSIONS, query)

    # --------------------------------------------------------- archives

    async def export_archive(self, session_id: str, /) -> bytes:
        """[A1] The ended session's archive file, built by the service (sealed there [A2])."""
        answer = await self._call(wire.EXPORT_ARCHIVE, wire.SessionRef(session_id=session_id))
        return answer.data

    async def import_archive(self, data: bytes, /) -> ArchiveManifest:
        """[A1] Restore an archive file's bytes; the service verifies and opens it."""
        return await self._call(wire.IMPORT_ARCHIVE, wire.ArchiveFile(data=data))

    # ----------------------------------------------------------- follow

    def follow_run_records(self, run_id: str, /, after: str = "") -> AsyncIterator[FollowedRecord]:
        """[S5] A run's records from ``after`` on, as they commit; resumes after a disconnect."""
        path = f"/v1/runs/{quote(run_id, safe='')}/records"
        return self._follow(path, "follow_run_records", after)

    def follow_session_run_records(
        self, session_id: str, /, after: str = ""
    ) -> AsyncIterator[FollowedRecord]:
        """[S5] A session's records from ``after`` on, as they commit; resumes likewise."""
        path = f"/v1/sessions/{quote(session_id, safe='')}/records"
        return self._follow(path, "follow_session_records", after)

    async def _follow(
        self, path: str, operation: str, after: str, *, attempts: int = 30
    ) -> AsyncIterator[FollowedRecord]:
        """Server-sent events of one log; reconnects from the last cursor seen.

        A stream the service ends (it is stopping) or a lost connection is
        resumed; ``TransientError`` after ``attempts`` failed reconnections in
        a row (about 25 seconds).
        """
        failures = 0
        while True:
            try:
                headers = {"last-event-id": after} if after else {}
                async with self._http.stream(
                    "GET", path, headers=headers, timeout=httpx.Timeout(None, connect=10.0)
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise _refusal(operation, response)
                    failures = 0
                    async for cursor, data in _events(response.aiter_lines()):
                        after = cursor
                        yield FollowedRecord(record=_RECORD.decode(data), cursor=cursor)
            except (httpx.RequestError, TransientError) as e:
                failures += 1
                if failures > attempts:
                    if isinstance(e, TransientError):
                        raise
                    raise TransientError(f"{type(e).__name__}: {e}", operation=operation) from e
                await asyncio.sleep(min(0.05 * 2**failures, 1.0))


_RECORD = msgspec.json.Decoder(Record)


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, bytes]]:
    """(id, data) of each ``record`` event of a server-sent event stream."""
    event_id, kind, data = "", "", ""
    async for line in lines:
        if not line:
            if kind == "record" and data:
                yield event_id, data.encode()
            kind, data = "", ""
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "id":
            event_id = value
        elif field == "event":
            kind = value
        elif field == "data":
            data = f"{data}\n{value}" if data else value


def _refusal(operation: str, response: httpx.Response) -> AgentledgerError:
    """The typed error a non-200 answer carries, or what its status means."""
    error = decode_error(response.content)
    if error is not None:
        return error
    text = response.text[:300]
    if response.status_code >= 500:
        return TransientError(f"HTTP {response.status_code}: {text}", operation=operation)
    return ValidationError(  # no typed error in the body: not an agentledger service
        field="url",
        expected=f"an agentledger store service answering {operation}",
        got=f"HTTP {response.status_code}",
        message=f"{operation}: HTTP {response.status_code}: {text}",
    )
