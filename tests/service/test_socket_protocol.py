"""The short way of ``agentledger serve``'s WebSocket protocol for the frames of calls
(:class:`~agentledger.service.socket_protocol.SocketProtocol`): whatever the frames, their
splitting into packets or what comes between them, each call is answered as over
uvicorn's own protocol, and every other frame as ``websockets`` answers it.

A client of raw frames (``websockets``' sans-I/O client reads the answers) against the
service in this process, served by uvicorn with that protocol as ``serve`` does, and
with uvicorn's own: each case passes on both."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvicorn
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from agentledger.service import TokenTable, add_token, create_app
from agentledger.service.socket_protocol import SocketProtocol
from agentledger.service.socket_wire import SOCKET_ROUTE, decode_answer, encode_call
from agentledger.service.state import ServiceState
from agentledger.storage import RecordBuilder, RunStart
from agentledger.storage.sqlite import SQLiteStore
from tests.conditions import HANG_GUARD, until

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MAX_SIZE = 64 * 1024


@pytest.fixture(params=[SocketProtocol, "websockets-sansio"], ids=["serve's", "uvicorn's"])
def ws(request: pytest.FixtureRequest) -> Any:
    """The WebSocket protocol: ``serve``'s, and uvicorn's own it must answer as."""
    return request.param


@asynccontextmanager
async def _service(tmp_path: Path, ws: Any) -> AsyncIterator[tuple[int, str, ServiceState]]:
    """The service in this process on a fresh SQLite file, served by uvicorn with the
    WebSocket protocol ``ws``: its port, a host token, its state."""
    tokens = tmp_path / "tokens.json"
    token = add_token(tokens, "host")
    store = await SQLiteStore.open(str(tmp_path / "ledger.db"))
    state = ServiceState(store, TokenTable.load(tokens))
    config = uvicorn.Config(create_app(state=state), host="127.0.0.1", port=0, lifespan="off",
                            log_level="critical", ws=ws,
                            ws_max_size=MAX_SIZE)  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        await until(lambda: server.started or task.done(), "uvicorn listening")
        if task.done():
            task.result()
        yield server.servers[0].sockets[0].getsockname()[1], token, state
    finally:
        server.should_exit = True
        await task
        await store.close()


class _Raw:
    """A WebSocket client writing frames as given, byte by byte if asked."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 conn: ClientProtocol) -> None:  # fmt: skip
        self.reader = reader
        self.writer = writer
        self.conn = conn
        self.events: list[Any] = []

    @classmethod
    async def open(cls, port: int, token: str) -> _Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        conn = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}{SOCKET_ROUTE}"))
        request = conn.connect()
        request.headers["Authorization"] = f"Bearer {token}"
        conn.send_request(request)
        raw = cls(reader, writer, conn)
        await raw.write(b"".join(conn.data_to_send()))
        while conn.state is State.CONNECTING:
            await raw._read()
        assert conn.state is State.OPEN, conn.handshake_exc
        raw.events = [e for e in raw.events if isinstance(e, Frame)]  # past the 101
        return raw

    async def write(self, data: bytes, *, piecewise: bool = False) -> None:
        for piece in [data[i : i + 1] for i in range(len(data))] if piecewise else [data]:
            self.writer.write(piece)
            await self.writer.drain()
            if piecewise:
                await asyncio.sleep(0.001)  # each byte its own packet

    async def _read(self) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), HANG_GUARD)
        if data:
            self.conn.receive_data(data)
        else:
            self.conn.receive_eof()
        self.events.extend(self.conn.events_received())

    async def frame(self) -> Frame:
        """The next frame the service sent."""
        while not self.events:
            if self.conn.state is State.CLOSED:
                raise EOFError
            await self._read()
        event = self.events.pop(0)
        assert isinstance(event, Frame), event
        return event

    async def answers(self, count: int) -> dict[int, tuple[int, bytes]]:
        """The next ``count`` answers, by call id."""
        got = {}
        while len(got) < count:
            frame = await self.frame()
            assert frame.opcode is Opcode.BINARY, frame
            call_id, status, answer = decode_answer(frame.data)
            got[call_id] = (status, answer)
        return got

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):  # the service closed it first
            await self.writer.wait_closed()


@asynccontextmanager
async def _raw(port: int, token: str) -> AsyncIterator[_Raw]:
    raw = await _Raw.open(port, token)
    try:
        yield raw
    finally:
        await raw.close()


def _frame(opcode: Opcode, data: bytes, *, fin: bool = True, mask: bool = True) -> bytes:
    return Frame(opcode, data, fin=fin).serialize(mask=mask, extensions=[])


def _call(call_id: int, name: str, request: object) -> bytes:
    return encode_call(call_id, name, msgspec.json.encode(request))


async def _created(raw: _Raw, call_id: int, session: str, *, piecewise: bool = False) -> None:
    request = {"session_id": session, "created_at": T0.isoformat()}
    await raw.write(_frame(Opcode.BINARY, _call(call_id, "create_session", request)),
                    piecewise=piecewise)  # fmt: skip
    assert (await raw.answers(1))[call_id][0] == 200


async def test_calls_split_into_bytes_or_sent_together_are_each_answered(
    tmp_path: Path, ws: Any
) -> None:
    """A call's frame arriving a byte at a time, and many frames in one packet (short and
    16-bit lengths among them): each call answered once, under its own id."""
    async with _service(tmp_path, ws) as (port, token, _), _raw(port, token) as raw:
        await _created(raw, 1, "split", piecewise=True)
        loads = [_frame(Opcode.BINARY, _call(10 + i, "load_session", {"session_id": "split"}))
                 for i in range(5)]  # fmt: skip
        padded = {"session_id": "split", "created_at": T0.isoformat(), "labels": {"x": "y" * 99}}
        together = [*loads, _frame(Opcode.BINARY, _call(20, "create_session", padded))]
        assert len(together[-1]) > 126 + 6  # a 16-bit length
        await raw.write(b"".join(together))
        answers = await raw.answers(6)
        assert sorted(answers) == [10, 11, 12, 13, 14, 20]
        assert {answers[i][0] for i in range(10, 15)} == {200}
        assert answers[20][0] == 409  # a session of that id with other labels exists


async def test_pings_fragments_and_large_answers_are_answered_as_by_websockets(
    tmp_path: Path, ws: Any
) -> None:
    """A ping between calls is answered with its pong, in order; a call sent in fragments
    is answered as one message; an answer past 64 KiB arrives whole (64-bit length)."""
    async with _service(tmp_path, ws) as (port, token, state), _raw(port, token) as raw:
        await _created(raw, 1, "frag")
        call = _call(2, "load_session", {"session_id": "frag"})
        await raw.write(_frame(Opcode.PING, b"hi") + _frame(Opcode.BINARY, call[:5], fin=False)
                        + _frame(Opcode.CONT, call[5:]))  # fmt: skip
        pong = await raw.frame()
        assert (pong.opcode, pong.data) == (Opcode.PONG, b"hi")
        assert (await raw.answers(1))[2][0] == 200
        run = RecordBuilder(RunStart(run_id="big-r", agent_id="a", session_id="frag",
                                     started_at=T0))  # fmt: skip
        await state.store.start_root_run(run.root_start())
        for i in range(3):  # 90 KB of records: an answer past 64 KiB
            payload = b'{"text": "' + b"y" * 30_000 + b'"}'
            await state.store.append_run_record(
                run.record("note", payload, event_key=f"b{i}", at=T0)
            )
        await raw.write(_frame(Opcode.BINARY, _call(3, "list_run_records",
                                                    {"run_id": "big-r"})))  # fmt: skip
        status, answer = (await raw.answers(1))[3]
        assert status == 200
        assert len(answer) > 65536
        assert len(msgspec.msgpack.decode(answer)["records"]) == 4


async def test_frames_outside_the_protocol_close_the_connection_as_websockets_does(
    tmp_path: Path, ws: Any
) -> None:
    """An unmasked frame (1002), a frame past the service's size (1009), a text message
    (not a call: 1003): closed as uvicorn's own protocol closes them, calls before
    answered."""
    cases = [
        (_frame(Opcode.BINARY, _call(9, "load_session", {"session_id": "s"}), mask=False), 1002),
        (_frame(Opcode.BINARY, b"x" * (MAX_SIZE + 1)), 1009),
        (_frame(Opcode.TEXT, b"hello"), 1003),
    ]
    async with _service(tmp_path, ws) as (port, token, _):
        for i, (bad, code) in enumerate(cases):
            async with _raw(port, token) as raw:
                await _created(raw, 1, f"bad{i}")
                await raw.write(bad)
                closing = await raw.frame()
                assert closing.opcode is Opcode.CLOSE
                assert Close.parse(closing.data).code == code


async def test_calls_before_the_clients_close_are_made(tmp_path: Path, ws: Any) -> None:
    """Calls sent together with the client's close: the service echoes the close, and makes
    every call sent before it (their answers go nowhere: the connection is closed)."""
    async with _service(tmp_path, ws) as (port, token, state):
        async with _raw(port, token) as raw:
            await _created(raw, 1, "end")
            await raw.write(b"".join(
                _frame(Opcode.BINARY, _call(2 + i, "create_session", {"session_id": f"end{i}"}))
                for i in range(3)
            ) + _frame(Opcode.CLOSE, Close(1000, "").serialize()))  # fmt: skip
            frames = []
            with contextlib.suppress(EOFError):
                while True:
                    frames.append(await raw.frame())
            assert frames[-1].opcode is Opcode.CLOSE
        await until(lambda: state.admission.streams == 0, "the connection let go")
        for i in range(3):
            assert (await state.store.load_session(f"end{i}")).id == f"end{i}"


def test_serve_takes_the_short_way_only_on_the_uvicorn_releases_it_was_tested_with() -> None:
    """It reads attributes of uvicorn's own protocol: a release after those it was tested with
    (or a version it cannot read) gets uvicorn's protocol, which answers the same, slower."""
    from agentledger.service.server import _ws_protocol

    assert _ws_protocol() is SocketProtocol  # the uvicorn installed here
    assert _ws_protocol("0.55.0") is SocketProtocol
    assert _ws_protocol("0.56.0") == "auto"
    assert _ws_protocol("1.0.0") == "auto"
    assert _ws_protocol("0.56.0rc1") == "auto"
    assert _ws_protocol("next") == "auto"
