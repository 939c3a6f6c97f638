"""The activities: every piece of work the run loop delegates, and all its I/O.

Each activity takes and returns a msgspec Struct (:mod:`agentledger.runtime.wire`)
and may run more than once: store writes are built from their input alone
(deterministic event keys, the workflow's timestamps), so a retry is an
exact retry [X1]; stream events derive from the stored record and keep its
key. Every store write goes through the ``Store``.

Work that is not deterministic (a model call, a tool) is recorded by the
activity that does it. A retried attempt (its predecessor may have stored
its records and then lost its completion) reads first: a planner turn whose
plan is stored returns it without asking the planner again, and a tool call
whose result is stored returns it without running the tool again. A parallel
call, whose result the workflow records later with the step's others in call
order, saves its result in the store first (``Store.save_tool_result``).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import msgspec

from agentledger.engine.base import Activity, activity_attempt, result_problem
from agentledger.errors import (
    ContractError,
    CorruptRecordError,
    TransientError,
    ValidationError,
)
from agentledger.memory.types import ProductMemory
from agentledger.providers.model import ModelStreamEvent, StreamEnd
from agentledger.runtime import records as rt
from agentledger.runtime.busy import MESSAGE_CLAIMED, claim_spec
from agentledger.runtime.checkpoint import (
    CHECKPOINT_VERSION,
    RunCheckpoint,
    suspension,
)
from agentledger.runtime.events import delta_event
from agentledger.runtime.plan_check import check_plan
from agentledger.runtime.planner import (
    PlanInput,
    PlanResult,
    PlanResumeInput,
    PromptRenderer,
    RenderedPrompt,
    RunContext,
    ToolOutcome,
)
from agentledger.runtime.planner import ToolCall as PlannedCall
from agentledger.runtime.publisher import Publisher
from agentledger.runtime.registry import Registry
from agentledger.runtime.stream import StreamSink
from agentledger.runtime.tool_calls import carried, in_doubt, invoke_tool, tool_context
from agentledger.runtime.transcript_cache import KnownTranscript, TranscriptCache
from agentledger.runtime.windows import HistoryWindows
from agentledger.runtime.wire import (
    APPEND_RECORDS,
    BEGIN_RUN,
    COMPLETE_RUN,
    PLAN_TURN,
    SUSPEND_RUN,
    TOOL_CALL,
    AgentPlan,
    AppendRecordsInput,
    AppendRecordsOutput,
    BeginRunInput,
    BeginRunOutput,
    CompleteRunInput,
    CompleteRunOutput,
    PlanTurnInput,
    PlanTurnOutput,
    SuspendRunInput,
    ToolCallInput,
    ToolCallOutput,
)
from agentledger.runtime.workflow import plan_records
from agentledger.runtime.write_through import before, finish
from agentledger.storage import payloads
from agentledger.storage.builders import RecordBuilder
from agentledger.storage.derivation import HISTORY_COPIED
from agentledger.storage.lifecycle.messages import steered_records
from agentledger.storage.protocol import Store
from agentledger.storage.replay import build_messages_from_run_log
from agentledger.storage.types import (
    AppendResult,
    Record,
    RunStart,
    RunStatus,
    SessionStatus,
    StartOutcome,
    StartResult,
)
from agentledger.transcript import (
    Message,
    ToolResultPart,
    ToolUsePart,
    decode_messages,
)

__all__ = ["Activities"]

T = TypeVar("T")


class Activities:
    """The runtime's activities, bound to its store, registry, stream and memory."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        stream: StreamSink | None = None,
        memory: ProductMemory | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.stream = stream
        self.memory = memory
        self.publisher = Publisher(stream, memory)
        self.transcripts = TranscriptCache()
        """Each running run's transcript as far as this process read it."""
        self._history = HistoryWindows(store, registry)
        self._shared = False  # a table went to an engine that may run activities elsewhere

    def table(self, *, ending: bool = False) -> dict[str, Activity]:
        """Every activity by the name the workflow calls it.

        With ``ending``, a planner turn asked to (``PlanTurnInput.complete``) records a
        final plan with the run's completion, in one transaction: for an engine that
        needs nothing else done when a run ends (in process). Every activity of a run
        then runs here, so the transcript cache follows the runs' writes and a planner
        turn reads nothing it wrote (until a table without ``ending`` is handed out:
        another worker may run activities too).
        """
        self._shared = self._shared or not ending
        self.transcripts.follows_writes = not self._shared
        return {
            BEGIN_RUN: self.begin_run,
            APPEND_RECORDS: self.append_records,
            PLAN_TURN: self.plan_turn_ending if ending else self.plan_turn,
            TOOL_CALL: self.tool_call,
            SUSPEND_RUN: self.suspend_run,
            COMPLETE_RUN: self.complete_run,
        }

    # ------------------------------------------------------------- publishing

    async def publish(self, records: Iterable[Record]) -> None:
        """Send each stored record's event to the stream and its content to product memory,
        in commit order (await it right after the store's answer, see :class:`Publisher`)."""
        await self.publisher.records(records)

    # ------------------------------------------------------------- activities

    async def _start(self, arg: BeginRunInput, records: list[Record]) -> StartResult:
        """[L1]-[L4] start the run (or [C2] stop it) in the store, with its first records."""
        builder = RecordBuilder(arg.run, turn_id=arg.turn_id)
        carried = tuple(records)
        written: list[Record] = []
        if arg.mode == "root":
            root = msgspec.structs.replace(builder.root_start(), records=carried)
            result = await self.store.start_root_run(root)
            written = [root.started, *([root.canceled] if result.canceled else [])]
            if result.outcome is StartOutcome.PROCEED and len(result.records) == len(records):
                placed = [result.started, *result.records]
                log = [root.started, *records]  # as stored: the new run's log begins so
                self.transcripts.seed(
                    arg.run.run_id,
                    [msgspec.structs.replace(r, id=p.id) for r, p in zip(log, placed, strict=True)],
                )
        elif arg.mode == "child":
            child = builder.child_start(
                parent_agent_id=arg.parent_agent_id,
                tool_name=arg.tool_name,
                tool_call_id=arg.tool_call_id,
            )
            child = msgspec.structs.replace(child, records=carried)
            result = await self.store.start_child_run(child)
            written = [
                child.parent_linked,
                child.started,
                *([child.canceled] if result.canceled else []),
            ]
        elif arg.mode == "one_shot":
            one = msgspec.structs.replace(builder.one_shot_start(), records=carried)
            result = await self.store.start_one_shot_run(one)
            written = [one.started]
        else:
            sub = builder.one_shot_child_start(
                parent_agent_id=arg.parent_agent_id,
                tool_name=arg.tool_name,
                tool_call_id=arg.tool_call_id,
            )
            sub = msgspec.structs.replace(sub, records=carried)
            result = await self.store.start_one_shot_child_run(sub)
            written = [sub.parent_linked, sub.started]
        if result.outcome is StartOutcome.PROCEED:
            written += records
        await self.publish(written)
        return result

    async def begin_run(self, arg: BeginRunInput) -> BeginRunOutput:
        """Start the run with its prompt, seeded history and new message: one transaction
        (with turn 1's ``planning`` phase too when the loop asks: it plans next).

        A start that fails writes nothing and raises. A failure to prepare the
        run (other than a TransientError, retried), or records the store
        refuses, come back as ``failure`` with the run started bare, so the
        loop ends it failed.
        """
        resolved = self.registry.agent(arg.run.agent_id)
        prompt: RenderedPrompt | None = None
        checkpoint: RunCheckpoint | None = None
        failure: payloads.Failure | None = None
        records: list[Record] = []
        planning = False
        try:
            planner = resolved.agent.planner
            if resolved.renders_prompt:  # checked once, when registration closed
                prompt = cast(PromptRenderer, planner).render_prompt(arg.run.agent_id)
            history = arg.history
            reference = _reference(arg)
            predecessor = arg.run.predecessor_run_id
            if predecessor:
                checkpoint = await self._checkpoint(predecessor)
                if arg.run.session_id:  # [V2] the suspended log, by reference
                    last = (await self.store.load_run(predecessor)).last_record_id
                    reference = payloads.TranscriptReference(
                        kind="continuation", run_id=predecessor, through=last
                    )
                else:  # no reference leaves a session, and a one-shot run has none
                    copied = await build_messages_from_run_log(self.store, predecessor, full=True)
                    history = tuple(copied)
            specs = []
            if prompt is not None:
                specs.append(rt.RecordSpec.prompt(prompt.prompt_id, prompt.version, prompt.text))
            if reference is not None:
                specs.append(rt.RecordSpec.referenced(reference))
            if arg.claim:  # a queued message's turn: which runtime started it
                specs.append(claim_spec(arg.claim))
            if arg.copied_from is not None:  # [G2] the copy names its source
                specs.append(
                    rt.RecordSpec(
                        type=HISTORY_COPIED,
                        event_key="transcript:copied_from",
                        payload=arg.copied_from.encode(),
                    )
                )
            if history:
                specs.append(rt.RecordSpec.seeded(history))
            if arg.message is not None and checkpoint is None:
                specs.append(rt.RecordSpec.appended("input", arg.message))
                specs.append(rt.RecordSpec.phase(rt.Phase.PROMPTED))
                if arg.planning and resolved.agent.max_turns >= 1:  # the loop plans next
                    specs.append(rt.RecordSpec.phase(rt.Phase.PLANNING, 1))
                    planning = True
            records = self._build(arg.run, arg.turn_id, arg.at, specs)
        except TransientError:
            raise
        except Exception as e:
            failure = _prepare_failure(e)
            records = []
        try:
            started = await self._start(arg, records)
        except ContractError as e:
            claim = [r for r in records if r.type == MESSAGE_CLAIMED]  # a queued turn's claim
            if len(claim) == len(records):
                raise
            started = await self._start(arg, claim)  # refused alone: the start's own error
            failure = _prepare_failure(e)
        if started.outcome is StartOutcome.STOP:  # [C2]
            return BeginRunOutput(outcome=started.outcome, run_status=started.run_status)
        if failure is not None:
            return BeginRunOutput(
                outcome=started.outcome, run_status=started.run_status, failure=failure
            )
        plan = AgentPlan(
            max_turns=resolved.agent.max_turns,
            agent_tools=dict(resolved.agent_tools),
            max_turn_attempts=resolved.agent.max_turn_attempts,
            effects=dict(resolved.effects),
        )
        ended = any(r.session_status is SessionStatus.ENDED for r in started.records)
        return BeginRunOutput(
            outcome=started.outcome,
            run_status=started.run_status,
            agent=plan,
            prompt=prompt,
            checkpoint=checkpoint,
            session_ended=ended,
            planning=planning,
        )

    async def _checkpoint(self, run_id: str) -> RunCheckpoint:
        stored = await self.store.load_run_suspension(run_id)
        try:
            return RunCheckpoint.decode(stored.data)
        except ValidationError as e:
            raise CorruptRecordError(run_id=run_id, record_id="", reason=f"checkpoint: {e}") from e

    async def append_records(self, arg: AppendRecordsInput) -> AppendRecordsOutput:
        """Append ordinary records in order [L8]; say whether the session has ended."""
        ended = await self._append(arg.run, arg.turn_id, arg.at, arg.records)
        return AppendRecordsOutput(session_ended=ended)

    async def _append(
        self, run: RunStart, turn_id: str, at: Any, specs: Iterable[rt.RecordSpec]
    ) -> bool:
        return await self._write(self._build(run, turn_id, at, specs))

    @staticmethod
    def _build(
        run: RunStart, turn_id: str, at: Any, specs: Iterable[rt.RecordSpec]
    ) -> list[Record]:
        """The records ``specs`` describe, as the store will be given them."""
        builder = RecordBuilder(run, turn_id=turn_id)
        return [
            builder.record(spec.type, spec.payload, event_key=spec.event_key, at=at)
            for spec in specs
        ]

    async def _write(self, records: list[Record]) -> bool:
        """Append ``records`` in one transaction [B1]; say whether the session has ended."""
        if not records:
            return False
        run_id = records[0].run_id
        held = self.transcripts.writing(run_id)
        results = await self.store.append_run_records(records)
        if held is not None:
            self.transcripts.wrote(run_id, held, _placed(records, results))
        await self.publish(records)
        return any(r.session_status is SessionStatus.ENDED for r in results)

    async def _write_turn(self, records: list[Record]) -> bool:
        """A planner turn's owed records, with the steering messages waiting for the run
        taken in the same transaction (a user message each, after the last step's tool
        results: the planner sees them); say whether the session has ended."""
        if not records:
            return False
        run_id = records[0].run_id
        held = self.transcripts.writing(run_id)
        done = await self.store.append_turn_records(records)
        built = [r for m in done.steered for r in steered_records(records[-1], m)]
        steered = [
            msgspec.structs.replace(r, id=placed.id)
            for r, placed in zip(built, done.steered_records, strict=False)
        ]
        if held is not None:
            placed = _placed(records, done.results)
            if len(steered) != len(built) or not all(p.inserted for p in done.steered_records):
                placed = []
            self.transcripts.wrote(run_id, held, placed and [*placed, *steered])
        await self.publish([*records, *steered])
        return any(r.session_status is SessionStatus.ENDED for r in done.results)

    async def plan_turn_ending(self, arg: PlanTurnInput) -> PlanTurnOutput:
        """:meth:`plan_turn`, a final plan recorded with the run's completion when asked."""
        return await self._plan_turn(arg, ending=arg.complete)

    async def plan_turn(self, arg: PlanTurnInput) -> PlanTurnOutput:
        """:meth:`_plan_turn`, the run's completion left to ``complete_run``."""
        return await self._plan_turn(arg, ending=False)

    async def _plan_turn(self, arg: PlanTurnInput, *, ending: bool) -> PlanTurnOutput:
        """One planner turn: what the loop owes, then the plan, each recorded in one transaction.

        The owed records (the last step's results, this turn's phase) are
        committed and published before the planner is asked, so the turn's
        model deltas follow them on the stream, and the planner reads them
        from the log. A planner error becomes a failure (a TransientError is
        retried). A retried attempt whose plan is already stored returns it
        without asking the planner again.
        """
        run = arg.run
        owed = self._build(run, arg.turn_id, arg.at, arg.records)
        ended = await before(self._write_turn(owed)) if owed else False
        if ended:
            return PlanTurnOutput(session_ended=True)  # no new planner work [D2]
        if activity_attempt() > 1:
            stored = await self._stored_plan(run.run_id, arg.turn, ending)
            if stored is not None:
                return stored
        out, window = await self._plan(arg)
        plan = out.result
        if plan is None:
            return out
        problem = result_problem(
            PlanTurnOutput(result=plan, recorded=True, suspended=True, session_ended=True)
        )
        if problem:  # the loop could not get this plan: it is not recorded either
            failure = payloads.Failure(
                message=problem, kind="planner_error", code="PayloadTooLargeError"
            )
            return PlanTurnOutput(failure=failure)
        if ending and plan.final is not None:
            await finish(self._record_final(arg, plan, window))
            return PlanTurnOutput(result=plan, recorded=True, completed=True)
        suspended = await finish(self._record_plan(arg, plan, window))
        return PlanTurnOutput(result=plan, recorded=True, suspended=suspended)

    async def _record_final(
        self, arg: PlanTurnInput, plan: PlanResult, window: list[rt.RecordSpec]
    ) -> None:
        """Write a final plan's records (after the turn's window [V5]), then [L7] the run's
        ``completed`` terminal record: one transaction.

        A cancellation recorded while the planner ran interrupts the turn (the
        engine cancels it) before this write; one recorded during it is too late
        for this run, as for one recorded while ``complete_run`` writes.
        """
        effects = self.registry.agent(arg.run.agent_id).effects
        specs = [*window, *plan_records(arg.turn, plan, effects, arg.run.run_id)]
        records = self._build(arg.run, arg.turn_id, arg.at, specs)
        cmd = RecordBuilder(arg.run, turn_id=arg.turn_id).terminal(RunStatus.COMPLETED, at=arg.at)
        await self.store.record_run_terminal(msgspec.structs.replace(cmd, records=tuple(records)))
        await self.publish([*records, cmd.record])
        self.transcripts.forget(arg.run.run_id)

    async def _record_plan(
        self, arg: PlanTurnInput, plan: PlanResult, window: list[rt.RecordSpec]
    ) -> bool:
        """Write the plan's records, after the turn's window [V5] if its history policy
        cut; a plan that waits for outside input is written with the run's suspension,
        in one transaction.

        Unless a cancellation was recorded meanwhile [C1]: then the loop ends
        the run canceled at its next safe point. Returns whether it suspended.
        """
        effects = self.registry.agent(arg.run.agent_id).effects
        specs = [*window, *plan_records(arg.turn, plan, effects, arg.run.run_id)]
        records = self._build(arg.run, arg.turn_id, arg.at, specs)
        if plan.await_ is None or (await self.store.load_run(arg.run.run_id)).cancellation_reason:
            await self._write(records)
            return False
        checkpoint = RunCheckpoint(
            version=CHECKPOINT_VERSION,
            agent_id=arg.run.agent_id,
            turn=arg.turn,
            awaiting=plan.await_,
        )
        await self._suspend(arg.run, arg.turn_id, arg.at, checkpoint, records)
        return True

    async def _stored_plan(
        self, run_id: str, turn: int, ending: bool = False
    ) -> PlanTurnOutput | None:
        """The plan of turn ``turn`` as an earlier attempt recorded it (None if it did not);
        with ``ending``, a final plan says whether the run's completion is recorded too.

        A plan that waits for outside input is whole only with the run's
        suspension: its checkpoint holds what the plan awaits. Without it, the
        earlier attempt died between its two writes and this one finishes them.
        """
        step = rt.turn_step(turn)
        final = rt.messages_key(f"{step}:final")
        asked = rt.messages_key(f"{step}:assistant")
        message: Message | None = None
        scheduled = suspended = False
        answer: PlanResult | None = None
        async for record in self._records(run_id):
            if answer is not None:  # its completion, if any, follows it in its transaction
                if record.type == payloads.RUN_COMPLETED:
                    return PlanTurnOutput(result=answer, recorded=True, completed=ending)
                continue
            if record.type == rt.TRANSCRIPT_APPENDED and record.event_key == final:
                answer = PlanResult(final=decode_messages(record.payload)[0])
                continue
            if record.type == rt.TRANSCRIPT_APPENDED and record.event_key == asked:
                message = decode_messages(record.payload)[0]
            # written with a tool plan's message, in its transaction
            scheduled = scheduled or (message is not None and record.type == rt.TOOL_CALL_SCHEDULED)
            suspended = suspended or record.type == payloads.RUN_SUSPENDED
        if answer is not None:
            return PlanTurnOutput(result=answer, recorded=True)
        if message is None:
            return None
        if scheduled:
            calls = tuple(
                PlannedCall(id=p.id, name=p.name, input=p.input)
                for p in message.parts
                if isinstance(p, ToolUsePart)
            )
            return PlanTurnOutput(
                result=PlanResult(tool_calls=calls, message=message), recorded=True
            )
        if suspended:
            checkpoint = await self._checkpoint(run_id)
            if checkpoint.turn == turn and checkpoint.awaiting is not None:
                plan = PlanResult(await_=checkpoint.awaiting, message=message)
                return PlanTurnOutput(result=plan, recorded=True, suspended=True)
        return None  # an await's message without its suspension: ask again

    async def _records(self, run_id: str) -> AsyncIterator[Record]:
        """Every record of the run, in commit order."""
        cursor = ""
        while True:
            page = await self.store.list_run_records(run_id, cursor=cursor)
            for record in page.records:
                yield record
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def _plan(self, arg: PlanTurnInput) -> tuple[PlanTurnOutput, list[rt.RecordSpec]]:
        """Ask the planner; a planner error becomes a failure (TransientError is retried).

        Its transcript is the stored one (the owed records are in by now), cut by
        the agent's history policy; the records of that cut come back with the
        plan, to be written with it.
        """
        resolved = self.registry.agent(arg.run.agent_id)
        run = arg.run
        context = RunContext(
            run_id=run.run_id,
            agent_id=run.agent_id,
            session_id=run.session_id,
            turn_id=arg.turn_id,
            parent_run_id=run.parent_run_id,
            labels=dict(run.labels),
            turn=arg.turn,
        )

        known: list[KnownTranscript] = []
        window: list[rt.RecordSpec] = []

        async def load() -> tuple[Message, ...]:
            first = arg.turn == 1 and not arg.resume and not arg.records  # nothing written
            transcript = await self.transcripts.transcript(self.store, run.run_id, first_turn=first)
            transcript.validate()
            known.append(transcript)
            if resolved.agent.history is None:
                return transcript.messages
            windowed = await self._history.window(arg, context, resolved, transcript)
            window.extend(windowed.records)
            return windowed.messages

        common: dict[str, Any] = {
            "deltas": self._delta_sender(arg) if self.stream is not None else None,
            "run": context,
            "tools": resolved.definitions,
            "prompt": arg.prompt,
            "load_messages": load,
            "models": self.registry.model,
            "confirm_tools": resolved.confirm_tools,
        }
        planner = resolved.agent.planner
        try:
            if arg.resume:
                resume = PlanResumeInput(tool_results=arg.tool_results, answer=arg.answer, **common)
                inputs: PlanInput = resume
                result = await planner.plan_resume(resume)
            else:
                inputs = PlanInput(**common)
                result = await planner.plan_start(inputs)
            messages = await inputs.prepare_messages()
            if known:
                messages = known[0].messages
            problem = check_plan(result, messages, known=known[0] if known else None)
        except TransientError:
            raise
        except Exception as e:
            failure = payloads.Failure(
                message=f"{type(e).__name__}: {e}", kind="planner_error", code=type(e).__name__
            )
            return PlanTurnOutput(failure=failure), []
        if problem:
            failure = payloads.Failure(message=problem, kind="invalid_plan")
            return PlanTurnOutput(failure=failure), []
        return PlanTurnOutput(result=result), window

    def _delta_sender(self, arg: PlanTurnInput) -> Callable[[ModelStreamEvent], Awaitable[None]]:
        """Send one model call's streamed events to the stream as ``model_delta`` (no record)."""
        attempt = uuid.uuid4().hex[:12]
        seq = itertools.count()
        run = arg.run
        base = {
            "run_id": run.run_id,
            "agent_id": run.agent_id,
            "session_id": run.session_id,
            "turn_id": arg.turn_id,
        }

        async def send(delta: ModelStreamEvent) -> None:
            if self.stream is None or isinstance(delta, StreamEnd):
                return
            now = datetime.now(UTC)
            at = now.replace(microsecond=now.microsecond - now.microsecond % 1000)
            event = delta_event(
                {**base, "timestamp": at},
                turn=arg.turn,
                attempt=attempt,
                seq=next(seq),
                delta=delta,
            )
            if event is not None:
                await self.publisher.delta(event)

        return send

    async def tool_call(self, arg: ToolCallInput) -> ToolCallOutput:
        """Run one tool call and record its result (``arg.at`` set), or save it (a parallel
        call, whose result the workflow records with the step's others, in call order).

        A retried attempt whose result is already stored returns it without
        running the tool again. A retried attempt of a ``once`` call that finds no
        result is in doubt: it never runs the tool, and says so (``in_doubt``).
        """
        call, run = arg.call, arg.run
        key = rt.RecordSpec.result(arg.step, call.id, call.name, None, False).event_key
        if arg.at is None:
            saved = await self._parallel_call(arg, key)
            if saved is None:
                return in_doubt(arg)
            return ToolCallOutput(outcome=saved)
        if activity_attempt() > 1:
            found: ToolOutcome | None = None
            settled = rt.messages_key(f"{arg.step}:tool_results")
            async for record in self._records(run.run_id):
                if record.type == rt.TOOL_RESULT_RECEIVED and record.event_key == key:
                    got = rt.decode_json(record.payload, rt.ToolResultPayload)
                    found = ToolOutcome(
                        tool_call_id=call.id,
                        tool_name=call.name,
                        content=got.content,
                        is_error=got.is_error,
                    )
                elif found is not None and record.event_key == settled:
                    return ToolCallOutput(outcome=found, settled=True)
            if found is not None:
                return ToolCallOutput(outcome=found)
            if arg.effect == "once":
                return in_doubt(arg)
        outcome = carried(arg, await invoke_tool(self.registry, arg, tool_context(arg)))
        spec = rt.RecordSpec.result(arg.step, call.id, call.name, outcome.content, outcome.is_error)
        if not arg.then_turn:
            ended = await finish(self._append(run, arg.turn_id, arg.at, [spec]))
            return ToolCallOutput(outcome=outcome, session_ended=ended)
        part = ToolResultPart(
            tool_use_id=call.id, content=outcome.content, is_error=outcome.is_error
        )
        specs = [  # what the loop's next planner turn would write first, taken along
            spec,
            rt.RecordSpec.appended(f"{arg.step}:tool_results", Message(role="user", parts=(part,))),
            rt.RecordSpec.phase(rt.Phase.SYNTHESIZING, arg.then_turn),
        ]
        ended = await finish(self._write_turn(self._build(run, arg.turn_id, arg.at, specs)))
        return ToolCallOutput(outcome=outcome, session_ended=ended, settled=True)

    async def _parallel_call(self, arg: ToolCallInput, key: str) -> ToolOutcome | None:
        """A parallel call's outcome, its tool run once across attempts (None: a once call
        in doubt).

        The outcome is saved in the store under the call's result key before the
        activity completes; an attempt that finds one saved returns it, and an
        attempt that ran the tool too adopts the one the store kept.
        """
        saved = await self.store.load_tool_result(arg.run.run_id, key)
        if saved is None:
            if arg.effect == "once" and activity_attempt() > 1:
                return None
            ran = carried(arg, await invoke_tool(self.registry, arg, tool_context(arg)))
            data = rt.encode_json(ran)
            saved = await finish(self.store.save_tool_result(arg.run.run_id, key, data))
        try:
            outcome: ToolOutcome = rt.decode_json(saved, ToolOutcome)
        except msgspec.DecodeError as e:
            raise CorruptRecordError(
                run_id=arg.run.run_id, record_id=f"tool_result:{key}", reason=str(e)
            ) from e
        if outcome.tool_call_id != arg.call.id:
            raise CorruptRecordError(
                run_id=arg.run.run_id,
                record_id=f"tool_result:{key}",
                reason=f"saved for call {outcome.tool_call_id!r}, not {arg.call.id!r}",
            )
        return outcome

    async def suspend_run(self, arg: SuspendRunInput) -> None:
        """``arg.records``, then [L6] checkpoint, status and ``run_suspended``: one transaction."""
        records = self._build(arg.run, arg.turn_id, arg.records_at or arg.at, arg.records)
        await self._suspend(arg.run, arg.turn_id, arg.at, arg.checkpoint, records)

    async def _suspend(
        self,
        run: RunStart,
        turn_id: str,
        at: datetime,
        checkpoint: RunCheckpoint,
        records: list[Record],
    ) -> None:
        """``records``, then [L6] the checkpoint, the status and ``run_suspended``, at once."""
        cmd = suspension(run, turn_id, at, checkpoint)
        await self.store.record_run_suspension(msgspec.structs.replace(cmd, records=tuple(records)))
        await self.publish([*records, cmd.record])
        self.transcripts.forget(run.run_id)

    async def complete_run(self, arg: CompleteRunInput) -> CompleteRunOutput:
        """``arg.records``, then [L7] the terminal record: one transaction.

        A canceled run repeats its recorded reason [C1]/[C3].
        """
        records = self._build(arg.run, arg.turn_id, arg.records_at or arg.at, arg.records)
        reason = ""
        if arg.status is RunStatus.CANCELED:
            meta = await self.store.load_run(arg.run.run_id)
            reason = meta.cancellation_reason or payloads.ENGINE_CANCELED
        cmd = RecordBuilder(arg.run, turn_id=arg.turn_id).terminal(
            arg.status, at=arg.at, reason=reason, failure=arg.failure
        )
        await self.store.record_run_terminal(msgspec.structs.replace(cmd, records=tuple(records)))
        await self.publish([*records, cmd.record])
        self.transcripts.forget(arg.run.run_id)
        return CompleteRunOutput(cancellation_reason=reason)


def _placed(records: list[Record], results: Sequence[AppendResult]) -> list[Record]:
    """``records`` with the ids the store gave them; none if any was already stored (a
    retry: they are not what followed the log as this process last knew it)."""
    if len(results) != len(records) or not all(r.inserted for r in results):
        return []
    return [msgspec.structs.replace(r, id=p.id) for r, p in zip(records, results, strict=True)]


def _prepare_failure(error: Exception) -> payloads.Failure:
    """Why a started run could not be prepared (the loop ends it failed)."""
    return payloads.Failure(
        message=str(error), kind="activity_failed", code=type(error).__name__, retryable=False
    )


def _reference(arg: BeginRunInput) -> payloads.TranscriptReference | None:
    """[V1]/[V2] the history reference a new run's input names, as it is recorded."""
    source = arg.history_from
    if source is None:
        return None
    return payloads.TranscriptReference(
        kind=source.kind,
        run_id=source.run_id,
        through=source.through,
        exclude_reasoning=source.exclude_reasoning,
    )
