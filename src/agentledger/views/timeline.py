"""Where a run's time went: a waterfall of its steps, timed from the records' timestamps.

Each activity of the run loop writes its records in one store transaction,
all stamped with the time the step began (``runtime/workflow.py``). So a
step runs from its records' time to the next write's: a planner turn from
its phase record to the write after it, a lone tool call from its result
(stamped when the call began) to the write after it, a child run from its
link to the parent's result. Parallel tool calls are recorded together
when the last one ends, so their bars share the step's span, and say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from agentledger.runtime.records import (
    MODEL_USAGE,
    RUN_PHASE_CHANGED,
    TOOL_CALL_SCHEDULED,
    EventKey,
    KeyKind,
    Phase,
    ToolResultPayload,
    ToolScheduledPayload,
    UsagePayload,
    decode_payload,
    parse_event_key,
    phase_key,
    tool_key,
)
from agentledger.storage.payloads import (
    CANCELLATION_INTENT,
    CHILD_RUN_LINKED,
    RUN_COMPLETED,
    RUN_SUSPENDED,
    CancellationIntent,
    ChildRunLinked,
    RunSuspended,
)
from agentledger.storage.types import Record, RunMeta, RunStatus

__all__ = ["Row", "Timeline", "duration_text", "timeline", "turn_of"]

_TURN_PHASES = frozenset({Phase.PLANNING.value, Phase.SYNTHESIZING.value})


def duration_text(seconds: float) -> str:
    """A duration as people read it: ``12 ms``, ``1.24 s``, ``2 min 03 s``, ``1 h 02 min``."""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass(frozen=True)
class Row:
    """One bar of the waterfall.

    ``end`` is None while the step is still going (the bar reaches now).
    ``ticks`` are instants (the store writes row), ``link`` a child run id.
    """

    label: str
    kind: str
    depth: int
    start: datetime
    end: datetime | None
    note: str = ""
    link: str = ""
    ticks: tuple[tuple[datetime, str], ...] = ()


@dataclass
class Timeline:
    """A run's rows, from its start to its end (or to ``now`` while it runs)."""

    start: datetime
    end: datetime
    running: bool
    rows: list[Row] = field(default_factory=list)

    @property
    def total(self) -> float:
        """The run's duration so far, in seconds."""
        return max((self.end - self.start).total_seconds(), 0.0)

    def left(self, at: datetime) -> float:
        """Where ``at`` falls on the bar, in per mille of the run's span."""
        span = self.total
        if span <= 0:
            return 0.0
        return round(min(max((at - self.start).total_seconds() / span, 0.0), 1.0) * 1000, 1)

    def width(self, row: Row) -> float:
        """The row's bar width in per mille (at least a sliver, so it shows)."""
        end = row.end or self.end
        return max(round(self.left(end) - self.left(row.start), 1), 2.0)

    def seconds(self, row: Row) -> float:
        """The row's duration in seconds (to now while it runs)."""
        return max(((row.end or self.end) - row.start).total_seconds(), 0.0)


def turn_of(record: Record) -> EventKey | None:
    """The key of a planner turn's phase record (None for any other record)."""
    if record.type != RUN_PHASE_CHANGED:
        return None
    key = parse_event_key(record.event_key)
    return key if key.kind is KeyKind.PHASE and key.turn and key.name in _TURN_PHASES else None


def _tokens(payload: UsagePayload) -> str:
    parts = [
        f"{count} {name}"
        for count, name in (
            (payload.input_tokens, "in"),
            (payload.output_tokens, "out"),
            (payload.cache_read_tokens, "cache read"),
            (payload.cache_write_tokens, "cache write"),
        )
        if count
    ]
    return " · ".join(parts) + " tokens" if parts else "no tokens reported"


class _Batches:
    """The log as writes: consecutive records with one timestamp were written together."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.times: list[datetime] = []
        self.types: list[set[str]] = []
        self.index: dict[str, int] = {}
        for record in records:
            if not self.times or record.timestamp != self.times[-1]:
                self.times.append(record.timestamp)
                self.types.append(set())
            self.types[-1].add(record.type)
            self.index[record.id] = len(self.times) - 1

    def after(self, record: Record) -> datetime | None:
        """The time of the write after ``record``'s, if any."""
        nxt = self.index[record.id] + 1
        return self.times[nxt] if nxt < len(self.times) else None

    def ticks(self) -> tuple[tuple[datetime, str], ...]:
        """Each write's time and the record types it wrote."""
        return tuple((t, ", ".join(sorted(k))) for t, k in zip(self.times, self.types, strict=True))


class _Builder:
    """Builds one run's rows; ``until`` is the shared rule for where a step ends."""

    def __init__(self, run: RunMeta, records: Sequence[Record], now: datetime) -> None:
        self.run = run
        self.records = records
        self.ending = next((r for r in records if r.type in (RUN_COMPLETED, RUN_SUSPENDED)), None)
        running = run.status is RunStatus.RUNNING and self.ending is None
        start = records[0].timestamp if records else run.started_at
        if self.ending is not None:
            end = self.ending.timestamp
        else:
            end = now if running else run.updated_at
        self.line = Timeline(start=start, end=max(end, start), running=running)
        self.batches = _Batches(records)
        self.by_key = {r.event_key: r for r in records}
        self.links: dict[str, tuple[Record, ChildRunLinked]] = {}
        for r in records:
            if r.type == CHILD_RUN_LINKED:
                link = decode_payload(r, ChildRunLinked)
                self.links[link.tool_call_id] = (r, link)
        self.per_step: dict[str, int] = {}
        for r in records:
            if r.type == TOOL_CALL_SCHEDULED:
                step = parse_event_key(r.event_key).step
                self.per_step[step] = self.per_step.get(step, 0) + 1

    def until(self, record: Record) -> datetime | None:
        """The end of the step that wrote ``record``: the next write (None: still going)."""
        nxt = self.batches.after(record)
        if nxt is not None:
            return nxt
        return None if self.line.running else self.line.end

    def build(self) -> Timeline:
        line, records, run = self.line, self.records, self.run
        line.rows.append(
            Row(
                f"run · {run.agent_id}",
                "run",
                0,
                line.start,
                None if line.running else line.end,
                note=run.status.value,
            )
        )
        if records and records[0].type == "run_started":
            first_turn = next((r for r in records if turn_of(r)), None)
            line.rows.append(
                Row(
                    "start: prompt, history, new message",
                    "start",
                    1,
                    records[0].timestamp,
                    first_turn.timestamp if first_turn else self.until(records[0]),
                )
            )
        for r in records:
            turn = turn_of(r)
            if turn:
                line.rows.append(self._turn_row(r, turn))
            elif r.type == MODEL_USAGE:
                line.rows.append(self._model_row(r))
            elif r.type == TOOL_CALL_SCHEDULED:
                line.rows.append(self._tool_row(r))
            elif r.type == CANCELLATION_INTENT:
                reason = decode_payload(r, CancellationIntent).reason
                line.rows.append(
                    Row("cancellation requested", "cancel", 1, r.timestamp, r.timestamp, reason)
                )
        if self.ending is not None and self.ending.type == RUN_SUSPENDED:
            tools = decode_payload(self.ending, RunSuspended).required_tools
            named = ", ".join(tools)
            note = "waits for outside input" + (f" on {named}" if named else "")
            at = self.ending.timestamp
            line.rows.append(Row("suspended", "wait", 1, at, at, note, run.successor_run_id))
        count = len(self.batches.times)
        line.rows.append(
            Row(
                f"store writes ({count})",
                "write",
                1,
                line.start,
                line.end,
                ticks=self.batches.ticks(),
            )
        )
        return line

    def _turn_row(self, record: Record, turn: EventKey) -> Row:
        same_write = (
            self.ending is not None
            and self.ending.type == RUN_SUSPENDED
            and (self.batches.index[self.ending.id] == self.batches.index[record.id])
        )
        note = (
            "it suspended the run in its own write: its duration is not recorded"
            if (same_write)
            else ""
        )
        label = f"turn {turn.turn} · planner ({turn.name})"
        return Row(label, "turn", 1, record.timestamp, self.until(record), note)

    def _model_row(self, record: Record) -> Row:
        usage = decode_payload(record, UsagePayload)
        n = parse_event_key(record.event_key).turn
        phase = None
        if n:
            phase = self.by_key.get(phase_key(Phase.PLANNING, n)) or self.by_key.get(
                phase_key(Phase.SYNTHESIZING, n)
            )
        anchor = phase or record
        return Row(
            f"model call · {usage.model or '?'}",
            "model",
            2,
            anchor.timestamp,
            self.until(anchor),
            note=_tokens(usage) + " (timed with its turn)",
        )

    def _tool_row(self, scheduled: Record) -> Row:
        """A tool call's (or child run's) bar, from what its records can tell."""
        payload = decode_payload(scheduled, ToolScheduledPayload)
        call_id, name = payload.tool_call_id, payload.tool_name
        if payload.effect != "retry":  # keyed or once: what running it again would do
            name = f"{name} ({payload.effect})"
        step = parse_event_key(scheduled.event_key).step
        result = self.by_key.get(tool_key(step, call_id, "result"))
        line = self.line
        end = result.timestamp if result else (None if line.running else line.end)
        linked = self.links.get(call_id)
        if linked is not None:
            link, child = linked
            return Row(
                f"{name} · child run", "child", 2, link.timestamp, end, link=child.child_run_id
            )
        if result is None:
            note = "no result yet" if line.running else "no result recorded"
            return Row(f"tool · {name}", "tool", 2, scheduled.timestamp, end, note)
        ending = self.ending
        stopped = (
            ending is not None and self.batches.index[ending.id] == self.batches.index[result.id]
        )  # written with the run's end: a result the run gave a call it stopped
        got = decode_payload(result, ToolResultPayload) if stopped else None
        if got is not None and got.is_error and str(got.content).startswith("interrupted"):
            # written when the run stopped it: it ran from its scheduling until then at most
            note = f"{got.content}: it ran until then at most, its own end is not recorded"
            return Row(f"tool · {name} · interrupted", "tool", 2, scheduled.timestamp,
                       result.timestamp, note)  # fmt: skip
        if self.per_step.get(step, 0) == 1:  # a lone call's result is stamped when it began
            return Row(f"tool · {name}", "tool", 2, result.timestamp, self.until(result))
        note = "ran in parallel: the log holds when the step's calls ended, not each start"
        return Row(f"tool · {name}", "tool", 2, scheduled.timestamp, result.timestamp, note)


def timeline(run: RunMeta, records: Sequence[Record], now: datetime) -> Timeline:
    """The waterfall of ``run`` from its ``records`` (its log, in commit order)."""
    return _Builder(run, records, now).build()
