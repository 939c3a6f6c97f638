"""A flood of clients against a real ``agentledger serve``: what it sheds, keeps and costs.

Our own asyncio driver rather than locust: the flood needs clients no load
tool makes (a byte of headers every half second, a stream never read, one
follower per run timing each record), must run inside pytest with the rest of
``make test``, and must check the store afterwards; raw sockets and the real
``StoreClient`` do all of it in one event loop, with no new dependency.

Every connection goes to the service's own loopback URL (``127.0.0.1`` or
``::1``: :func:`run_flood` refuses any other), every part of the flood is
bounded in requests, and the whole is bounded in time (``Plan.seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from agentledger.errors import AgentledgerError, OverloadedError
from agentledger.service import StoreClient
from agentledger.storage import RecordBuilder, RunStart

__all__ = ["Plan", "Result", "rss_bytes", "run_flood"]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_LOOPBACK = {"127.0.0.1", "::1"}


@dataclass(frozen=True)
class Plan:
    """What the flood sends (every count is a bound)."""

    writers: int = 64
    """Writers appending at once, each with its own client (its own connection)."""
    writes: int = 40
    """Records each writer appends."""
    followers: int = 200
    """Followers, one per run, timing each record a timing writer appends."""
    timed_writes: int = 200
    """Records the timing writer appends (every 10 ms, one run in turn)."""
    slow_clients: int = 200
    """Clients trickling a byte every half second: half their headers, half a body."""
    scan_records: int = 2000
    """Records (4 KiB each) of the run the reader scans while 16 writers append."""
    scan_writers: int = 16
    unread_streams: int = 1
    """Follow streams of the scanned run whose client never reads."""
    unread_wait: float = 10.0
    """Seconds the unread stream's client waits, once the writers are done, for the service
    to close it (it reads what was sent meanwhile, then an end: the stream was cut)."""
    seconds: float = 60.0
    """The whole flood's bound: it stops by itself then, whatever is left."""


@dataclass
class Result:
    """What the flood saw."""

    acknowledged: int = 0
    lost: int = 0
    writer_errors: list[str] = field(default_factory=list)
    shed: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    """Answers the service counted, by HTTP status (its /metrics)."""
    follow_delays: list[float] = field(default_factory=list)
    timed_sent: int = 0
    slow_answers: dict[str, int] = field(default_factory=dict)
    """What each slow client got: 408, closed, or (a failure) served/timeout."""
    unread_cut: int = 0
    """Unread streams the service closed."""
    scan_pages: int = 0
    scan_seconds: float = 0.0
    ready_overloaded: bool = False
    """Whether /readyz said overloaded during the flood."""
    raw_503: int = 0
    raw_503_retry_after: int = 0
    rss_peak: int = 0
    baseline_ms: float = 0.0
    recovered_ms: float = 0.0
    recovery_seconds: float = -1.0
    flood_seconds: float = 0.0

    def p99_ms(self) -> float:
        delays = sorted(self.follow_delays)
        if not delays:
            return float("inf")
        return delays[max(0, int(len(delays) * 0.99) - 1)] * 1000

    def summary(self) -> str:
        requests = sum(self.statuses.values()) + sum(self.shed.values())
        return (
            f"requests {requests} (answered by status {dict(sorted(self.statuses.items()))}), "
            f"shed {sum(self.shed.values())} {self.shed}; writes acknowledged "
            f"{self.acknowledged}, lost {self.lost}; follow delay p99 {self.p99_ms():.1f} ms "
            f"({len(self.follow_delays)}/{self.timed_sent} records seen); slow clients "
            f"{self.slow_answers}; unread streams cut {self.unread_cut}; scan {self.scan_pages} "
            f"pages in {self.scan_seconds:.1f} s; raw 503s {self.raw_503} (with Retry-After "
            f"{self.raw_503_retry_after}); /readyz overloaded seen: {self.ready_overloaded}; "
            f"service RSS peak {self.rss_peak / 2**20:.0f} MiB; call latency before "
            f"{self.baseline_ms:.1f} ms, after {self.recovered_ms:.1f} ms, recovered in "
            f"{self.recovery_seconds:.1f} s; flood {self.flood_seconds:.1f} s"
        )


def rss_bytes(pid: int) -> int:
    """A process's resident memory now (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def run_flood(url: str, token: str, pid: int, plan: Plan) -> Result:
    """Flood the service at ``url`` (loopback only) as ``plan`` says; what it saw."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    if host not in _LOOPBACK:
        raise ValueError(f"the flood goes to loopback only (127.0.0.1 or ::1), not {host!r}")
    result = Result()
    deadline = time.monotonic() + plan.seconds
    host_client = StoreClient(url, token=token, max_connections=32, timeout=plan.seconds)
    try:
        await host_client.create_session("flood", created_at=T0)
        builders = await _start_runs(host_client, plan)
        result.baseline_ms = await _call_ms(host_client, builders["probe"][0])
        watch = asyncio.create_task(_watch(url, token, pid, result))
        flood = _Flood(url, token, host, port, plan, result, builders, deadline)
        started = time.monotonic()
        try:
            async with asyncio.timeout(max(1.0, deadline - time.monotonic())):
                await flood.run()
        except TimeoutError:
            result.writer_errors.append("the flood did not end within its bound")
        result.flood_seconds = time.monotonic() - started
        await _recover(host_client, builders["probe"][0], result, started + result.flood_seconds)
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await _metrics(url, token, result)
        await _check_kept(host_client, flood.acked, result)
    finally:
        await host_client.close()
    return result


async def _start_runs(client: StoreClient, plan: Plan) -> dict[str, list[RecordBuilder]]:
    """The runs the flood writes to: each writer's, the followed ones, the scanned one."""

    def runs(prefix: str, n: int) -> list[RecordBuilder]:
        starts = (RunStart(run_id=f"{prefix}{i}", agent_id="flood", session_id="flood",
                           started_at=T0) for i in range(n))  # fmt: skip
        return [RecordBuilder(start) for start in starts]

    made = {
        "writer": runs("w", plan.writers),
        "followed": runs("f", plan.followers),
        "scan": runs("scan", 1),
        "side": runs("side", plan.scan_writers),
        "probe": runs("probe", 1),
    }
    every = [b for group in made.values() for b in group]
    for i in range(0, len(every), 50):
        await asyncio.gather(*(client.start_root_run(b.root_start()) for b in every[i : i + 50]))
    scan = made["scan"][0]
    blob = b'{"pad": "' + b"x" * 4000 + b'"}'
    for i in range(0, plan.scan_records, 200):
        await client.append_run_records(
            [scan.record("note", blob, event_key=f"s{k}", at=T0)
             for k in range(i, min(i + 200, plan.scan_records))]
        )  # fmt: skip
    return made


async def _call_ms(client: StoreClient, probe: RecordBuilder, n: int = 20) -> float:
    """The median latency of ``n`` appends one after the other, in milliseconds."""
    took = []
    for _ in range(n):
        key = f"p{time.monotonic_ns()}"
        started = time.perf_counter()
        await client.append_run_record(probe.record("note", b"{}", event_key=key, at=T0))
        took.append(time.perf_counter() - started)
    return sorted(took)[n // 2] * 1000


class _Flood:
    """Every part of the flood, run together."""

    def __init__(
        self,
        url: str,
        token: str,
        host: str,
        port: int,
        plan: Plan,
        result: Result,
        builders: dict[str, list[RecordBuilder]],
        deadline: float,
    ) -> None:
        self.url, self.token, self.host, self.port = url, token, host, port
        self.plan, self.result, self.builders, self.deadline = plan, result, builders, deadline
        self.acked: dict[str, list[str]] = {}
        """Event keys acknowledged, by run."""
        self.sent: dict[tuple[str, str], float] = {}
        self.written = asyncio.Event()
        """Set once every writer is done."""

    async def run(self) -> None:
        followers = StoreClient(self.url, token=self.token,
                                max_connections=self.plan.followers + 8)  # fmt: skip
        try:
            opened = asyncio.Event()
            connected = [0]
            follow_tasks = [
                asyncio.create_task(self._follow(followers, b, connected, opened))
                for b in self.builders["followed"]
            ]
            if follow_tasks:
                async with asyncio.timeout(max(1.0, self.deadline - time.monotonic())):
                    await opened.wait()
            unread = [asyncio.create_task(self._unread()) for _ in range(self.plan.unread_streams)]
            slow = [asyncio.create_task(self._slow(i)) for i in range(self.plan.slow_clients)]
            burst = [asyncio.create_task(self._writer(b, "w")) for b in self.builders["writer"]]
            side = [asyncio.create_task(self._writer(b, "x")) for b in self.builders["side"]]
            scan = asyncio.create_task(self._scan())
            timed = asyncio.create_task(self._timed())
            await asyncio.gather(*burst, *side, scan, timed, *slow)
            self.written.set()
            await asyncio.gather(*unread)
            await asyncio.sleep(0.5)  # the last timed records reach their followers
            for task in follow_tasks:
                task.cancel()
            await asyncio.gather(*follow_tasks, return_exceptions=True)
        finally:
            await followers.close()

    async def _writer(self, builder: RecordBuilder, prefix: str) -> None:
        """One writer, its own client (a connection of its own), appending in turn."""
        run_id = builder.run.run_id
        keys = self.acked.setdefault(run_id, [])
        timeout = min(60.0, self.plan.seconds / 2)  # a shed write is retried within it
        async with StoreClient(self.url, token=self.token, max_connections=1,
                               timeout=timeout) as client:  # fmt: skip
            for k in range(self.plan.writes):
                if time.monotonic() > self.deadline - 5:
                    return
                key = f"{prefix}{k}"
                record = builder.record("note", b'{"k": %d}' % k, event_key=key, at=T0)
                try:
                    await client.append_run_record(record)
                except OverloadedError as e:  # shed even after its retries: not acknowledged
                    self.result.writer_errors.append(f"{run_id} {key}: {e}")
                    continue
                except AgentledgerError as e:
                    self.result.writer_errors.append(f"{run_id} {key}: {type(e).__name__}: {e}")
                    continue
                keys.append(key)
                self.result.acknowledged += 1

    async def _timed(self) -> None:
        """Appends to the followed runs in turn, every 10 ms, noting when each returned."""
        followed = self.builders["followed"]
        if not followed:
            return
        async with StoreClient(self.url, token=self.token, max_connections=2) as client:
            for k in range(self.plan.timed_writes):
                builder = followed[k % len(followed)]
                record = builder.record("note", b'{"t": %d}' % k, event_key=f"t{k}", at=T0)
                try:
                    await client.append_run_record(record)
                except AgentledgerError as e:
                    self.result.writer_errors.append(f"timed t{k}: {type(e).__name__}: {e}")
                    continue
                self.sent[(record.run_id, record.event_key)] = time.perf_counter()
                self.acked.setdefault(record.run_id, []).append(record.event_key)
                self.result.acknowledged += 1
                self.result.timed_sent += 1
                await asyncio.sleep(0.01)

    async def _follow(
        self, client: StoreClient, builder: RecordBuilder, connected: list[int],
        opened: asyncio.Event,
    ) -> None:  # fmt: skip
        seen_start = False
        async for followed in client.follow_run_records(builder.run.run_id):
            if not seen_start:  # run_started: the stream is open
                seen_start = True
                connected[0] += 1
                if connected[0] == self.plan.followers:
                    opened.set()
                continue
            at = self.sent.get((followed.record.run_id, followed.record.event_key))
            if at is not None:  # its append returned first (else too close to call)
                self.result.follow_delays.append(time.perf_counter() - at)

    async def _scan(self) -> None:
        """A reader listing the large run's pages from the start, twice."""
        started = time.monotonic()
        async with StoreClient(self.url, token=self.token, max_connections=1) as client:
            for _ in range(2):
                cursor = ""
                while True:
                    page = await client.list_run_records("scan0", cursor=cursor, limit=100)
                    self.result.scan_pages += 1
                    if not page.next_cursor:
                        break
                    cursor = page.next_cursor
        self.result.scan_seconds = time.monotonic() - started

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once unread
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (self.host, self.port))
        return await asyncio.open_connection(sock=sock)

    async def _slow(self, i: int) -> None:
        """A client sending its request a byte every half second, headers or body."""
        path = "/v1/append_run_record"
        body = b'{"pad": "' + b"y" * 200 + b'"}'
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer "
                f"{self.token}\r\nContent-Type: application/json\r\nContent-Length: "
                f"{len(body)}\r\n\r\n").encode()  # fmt: skip
        trickled, sent_first = (head, b"") if i % 2 == 0 else (body, head)
        kind = "headers" if i % 2 == 0 else "body"
        try:
            reader, writer = await self._connect()
        except OSError as e:
            self._slow_answer(f"{kind}: refused ({e.__class__.__name__})")
            return
        try:
            if sent_first:
                writer.write(sent_first)
            read = asyncio.create_task(reader.read(65536))
            for k in range(len(trickled)):
                if read.done() or time.monotonic() > self.deadline - 5:
                    break
                writer.write(trickled[k : k + 1])
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                await asyncio.wait([read], timeout=0.5)
            try:
                answer = await asyncio.wait_for(read, max(0.1, self.deadline - time.monotonic()))
                status = answer[9:12].decode(errors="replace") if answer else "closed"
            except TimeoutError:
                status = "no answer"
            self._slow_answer(f"{kind}: {status}")
        except ConnectionError:
            self._slow_answer(f"{kind}: reset")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _slow_answer(self, what: str) -> None:
        self.result.slow_answers[what] = self.result.slow_answers.get(what, 0) + 1

    async def _unread(self) -> None:
        """A follow stream of the large run whose client reads nothing until it is cut."""
        reader, writer = await self._connect()
        writer.write((f"GET /v1/runs/scan0/records HTTP/1.1\r\nHost: {self.host}\r\n"
                      f"Authorization: Bearer {self.token}\r\n\r\n").encode())  # fmt: skip
        await writer.drain()
        # Read nothing while the flood lasts; then: did the service cut the stream?
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self.written.wait(), max(0.1, self.deadline - 5 - time.monotonic())
            )
        try:
            async with asyncio.timeout(self.plan.unread_wait):
                while await reader.read(1 << 20):
                    pass
            self.result.unread_cut += 1  # it ended: the service closed it
        except ConnectionError:
            self.result.unread_cut += 1  # the service aborted it
        except TimeoutError:
            pass  # still open
        finally:
            writer.close()


async def _watch(url: str, token: str, pid: int, result: Result) -> None:
    """The service's RSS peak, what /readyz says and raw 503s, every 100 ms."""
    async with aiohttp.ClientSession() as http:
        while True:
            result.rss_peak = max(result.rss_peak, rss_bytes(pid))
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(f"{url}/readyz", timeout=aiohttp.ClientTimeout(2)) as r:
                    text = await r.text()
                    if r.status == 503 and text.startswith("overloaded"):
                        result.ready_overloaded = True
                async with http.post(
                    f"{url}/v1/load_session_status",
                    data=b'{"session_id": "flood"}',
                    headers={"authorization": f"Bearer {token}",
                             "content-type": "application/json"},
                    timeout=aiohttp.ClientTimeout(5),
                ) as r:  # fmt: skip
                    await r.read()
                    if r.status == 503:
                        result.raw_503 += 1
                        result.raw_503_retry_after += "retry-after" in r.headers
            await asyncio.sleep(0.1)


async def _recover(client: StoreClient, probe: RecordBuilder, result: Result, ended: float) -> None:
    """Seconds after the flood until calls are as fast as before it (within 3x, or 5 ms)."""
    goal = max(result.baseline_ms * 3, 5.0)
    for _ in range(100):
        result.recovered_ms = await _call_ms(client, probe, 10)
        if result.recovered_ms <= goal:
            result.recovery_seconds = time.monotonic() - ended
            return
        await asyncio.sleep(0.1)


async def _metrics(url: str, token: str, result: Result) -> None:
    """The answers the service counted by status, and what it shed by limit."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        text = await r.text()
    for status, count in re.findall(r'^agentledger_requests_total\{[^}]*status="(\d+)"\} (\S+)',
                                    text, re.M):  # fmt: skip
        result.statuses[int(status)] = result.statuses.get(int(status), 0) + int(float(count))
    for limit, count in re.findall(r'^agentledger_shed_total\{limit="(\w+)"\} (\S+)', text, re.M):
        result.shed[limit] = int(float(count))


async def _check_kept(client: StoreClient, acked: dict[str, list[str]], result: Result) -> None:
    """Count every acknowledged write the store does not hold (none may be lost)."""
    for run_id, keys in acked.items():
        held: set[str] = set()
        cursor = ""
        while True:
            page = await client.list_run_records(run_id, cursor=cursor, limit=500)
            held.update(r.event_key for r in page.records)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        result.lost += sum(1 for key in keys if key not in held)
