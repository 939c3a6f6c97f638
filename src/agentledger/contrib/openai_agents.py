"""An OpenAI Agents SDK ``Session`` on agentledger product memory (DESIGN section 13).

``MemorySession(session_id, memory)`` keeps a conversation's items in any
product-memory backend (`~agentledger.memory.InMemoryMemory`,
`~agentledger.memory.SQLiteMemory`, ``PostgresMemory``), each item one
`~agentledger.memory.FrameworkItem` under ``(agent_id, session_id)``. Items come
back exactly as they were added (fresh copies: floats as floats, nothing
reordered); one ``add_items`` call is one transaction, and ``pop_item`` is an
atomic delete in the backend, so concurrent writers on one session, in threads
or processes, lose nothing, duplicate nothing, and never pop the same item
twice. `items_to_messages` reads the items back as a transcript.

Compaction (the SDK's ``OpenAIResponsesCompactionSession``, alone or under
``EncryptedSession``) replaces items in one transaction of the memory, and
only if no other writer changed them since they were read. The replaced items
are kept, in order, under the run ``compacted_run_id(session_id)`` of the same
agent, each compaction followed there by a `COMPACTION` record naming the
items it replaced and the items it wrote (`MemorySession.compactions`).

Needs the SDK: agentledger's ``[openai-agents]`` extra.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from agents.memory import SessionSettings
    from agents.memory.session import _CompactionSnapshot

from agentledger.errors import (
    CorruptRecordError,
    TranscriptError,
    TransientError,
    ValidationError,
)
from agentledger.memory.types import FrameworkItem, MemoryEvent, ProductMemory
from agentledger.providers import openai_responses
from agentledger.providers._json import b64decode
from agentledger.transcript import (
    ImagePart,
    JsonNumber,
    Message,
    Part,
    TextPart,
    ToolResultPart,
)


# Only the SDK's types are used, so importing it (seconds of start-up) is left to the
# caller, who runs it anyway; a missing SDK still fails here, with the install hint.
def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


if not _installed("agents"):
    from agentledger._extras import needs_extra

    raise needs_extra(
        "agentledger.contrib.openai_agents",
        "openai-agents",
        ModuleNotFoundError("No module named 'agents'", name="agents"),
    )

__all__ = ["COMPACTION", "FRAMEWORK", "MemorySession", "items_to_messages"]

FRAMEWORK = "openai-agents"
"""The ``framework`` of the `FrameworkItem`\\ s a `MemorySession` stores."""

COMPACTION = "openai-agents/compaction"
"""The ``framework`` of the record that says what a compaction replaced (see `MemorySession`)."""

_REPLACE_ATTEMPTS = 100
"""How often a whole-history replacement rereads a session other writers keep changing."""


def _enc_hook(value: Any) -> Any:
    if isinstance(value, JsonNumber):  # how SQL backends hand back a stored float
        return msgspec.Raw(value.literal.encode("ascii"))
    raise TypeError(f"not JSON: {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def _copy(item: Mapping[str, Any]) -> dict[str, Any]:
    """A fresh plain copy of a JSON object, every fractional number a float."""
    copied: dict[str, Any] = msgspec.json.decode(_ENCODER.encode(item))
    return copied


class _Refused(ValidationError, TypeError, ValueError):
    """A refusal the SDK's own sessions raise as TypeError or ValueError.

    Catchable as agentledger's `ValidationError` and as what code written for
    the SDK already catches (``json.dumps`` and the SDK's settings check raise those).
    """


class _Closed(ValidationError, RuntimeError):
    """Use of a closed session: a `ValidationError`, and a RuntimeError as in the SDK."""


def _checked(index: int, item: object) -> dict[str, Any]:
    """A plain copy of ``item``, refused unless it reads back equal (JSON, nothing changed)."""
    if not isinstance(item, Mapping):
        raise _Refused(field=f"items[{index}]", expected="a JSON object (dict)", got=item)
    try:
        copied = _copy(item)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:  # recursion: a cycle
        raise _Refused(
            field=f"items[{index}]",
            expected="plain JSON",
            got=item,
            message=f"items[{index}] is not plain JSON: {e}",
        ) from e
    if copied != item:  # a tuple, NaN, a non-str key... would not come back as written
        raise _Refused(field=f"items[{index}]", expected="JSON that reads back unchanged", got=item)
    return copied


def _settings(value: object) -> SessionSettings:
    """``value`` as the SDK's ``SessionSettings``: None is the default, a dict is converted.

    The SDK's own conversion decides, so an unknown key or a bad limit is refused
    exactly when the SDK's sessions refuse it.
    """
    from agents.memory.session_settings import SessionSettings, coerce_session_settings

    if value is None:
        return SessionSettings()
    try:
        return coerce_session_settings(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise _Refused(
            field="session_settings",
            expected="SessionSettings or a dict of its fields",
            got=value,
            message=f"invalid session_settings: {e}",
        ) from e


class MemorySession:
    """An OpenAI Agents SDK session (the ``agents.memory.Session`` protocol) on product memory.

    Pass it as ``Runner.run(agent, input, session=MemorySession("chat-1", memory))``.
    The session's items live in ``memory`` under ``(agent_id, session_id)``;
    the memory stays the caller's to open and close. `close` ends the session
    (as the SDK's ``SQLiteSession.close``); the memory stays open for others.
    """

    def __init__(
        self,
        session_id: str,
        memory: ProductMemory,
        *,
        agent_id: str = FRAMEWORK,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        """Keep the items of ``session_id`` in ``memory``.

        ``session_settings`` is as in the SDK's sessions: None means the
        default ``SessionSettings()``, a dict is converted by the SDK's rules.

        Raises:
            ValidationError: ``session_id`` or ``agent_id`` is empty, or
                ``session_settings`` has a key or value the SDK refuses (then
                it is also the TypeError or ValueError the SDK raises).
        """
        for name, value in (("session_id", session_id), ("agent_id", agent_id)):
            if not isinstance(value, str) or not value:
                raise ValidationError(field=name, expected="a non-empty str", got=value)
        self.session_id = session_id
        self.agent_id = agent_id
        self.memory = memory
        self._settings: SessionSettings | None = None
        self.session_settings = session_settings
        self._closed = False

    @property
    def session_settings(self) -> SessionSettings:
        """The default settings of `get_items` (the SDK's ``SessionSettings``; never None)."""
        if self._settings is None:  # built on first read: a session never asked costs no import
            self._settings = _settings(None)
        return self._settings

    @session_settings.setter
    def session_settings(self, value: SessionSettings | Mapping[str, Any] | None) -> None:
        self._settings = None if value is None else _settings(value)

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed

    def close(self) -> None:
        """End the session: every later call is refused. The memory stays open.

        Synchronous and idempotent, as the SDK's ``SQLiteSession.close``.
        """
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise _Closed(
                field="session",
                expected="an open session",
                got="closed",
                message=f"{type(self).__name__} is closed (session {self.session_id!r})",
            )

    def _item(self, event: MemoryEvent) -> dict[str, Any]:
        if not isinstance(event, FrameworkItem) or event.framework != FRAMEWORK:
            raise CorruptRecordError(
                run_id=self.session_id,
                record_id=event.key,
                reason=f"expected a {FRAMEWORK} item, found a {event.__struct_config__.tag} event",
            )
        return _copy(event.item)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first; with ``limit``, only the latest ``limit``.

        As the SDK's own sessions: ``limit=None`` falls back to
        ``session_settings.limit``, 0 returns nothing, a negative limit returns everything.

        Raises:
            ValidationError: ``limit`` is not None or an int, or the session is closed.
        """
        self._check_open()
        if limit is not None and (type(limit) is not int):
            raise ValidationError(field="limit", expected="None or an int", got=limit)
        default = None if self._settings is None else self._settings.limit
        resolved = default if limit is None else limit
        if resolved == 0:
            return []
        last = resolved if resolved is not None and resolved > 0 else None
        snapshot = await self.memory.load_run(self.agent_id, self.session_id, last=last)
        return [self._item(event) for event in snapshot.events]

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in order, all in one transaction.

        Raises:
            ValidationError: the session is closed (also a RuntimeError, as in the
                SDK), or an item is not plain JSON that reads back unchanged (also
                the TypeError or ValueError the SDK raises); nothing is stored then.
        """
        self._check_open()
        if not items:
            return
        now = datetime.now(UTC)
        events = [
            FrameworkItem(
                key=uuid.uuid4().hex, timestamp=now, framework=FRAMEWORK, item=_checked(i, item)
            )
            for i, item in enumerate(items)
        ]
        await self.memory.append_events(self.agent_id, self.session_id, *events)

    async def pop_item(self) -> Any | None:
        """Remove and return the latest item (None if the session is empty)."""
        self._check_open()
        event = await self.memory.pop_event(self.agent_id, self.session_id)
        return None if event is None else self._item(event)

    async def clear_session(self) -> None:
        """Delete every item of the session, and the items its compactions replaced."""
        self._check_open()
        await self.memory.delete_run(self.agent_id, self.session_id)
        await self.memory.delete_run(self.agent_id, self.compacted_run_id)

    @property
    def compacted_run_id(self) -> str:
        """The memory run that keeps the items compactions replaced, and their records."""
        return f"{self.session_id}\x1fcompacted"

    async def compactions(self) -> list[dict[str, Any]]:
        """What each compaction of the session replaced, oldest first.

        Each entry is ``{"replaced": [items], "output": [items], "whole": bool}``:
        the items the compaction took out of the session (kept, as they were
        stored) and the items it put in their place; ``whole`` says whether it
        replaced the whole history (a manual compaction) or its latest items;
        ``"expired": n`` is there when it also deleted the session's ``n``
        oldest items an encrypted session found expired (those are not kept).

        Raises:
            CorruptRecordError: the kept items or a record are damaged.
        """
        self._check_open()
        snapshot = await self.memory.load_run(self.agent_id, self.compacted_run_id)
        kept: dict[str, dict[str, Any]] = {}
        found: list[dict[str, Any]] = []
        for event in snapshot.events:
            if isinstance(event, FrameworkItem) and event.framework == COMPACTION:
                record = _copy(event.item)
                try:
                    replaced = [kept.pop(key) for key in record["replaced"]]
                except (KeyError, TypeError) as e:
                    raise CorruptRecordError(
                        run_id=self.compacted_run_id,
                        record_id=event.key,
                        reason=f"a compaction names an item that is not kept: {e}",
                    ) from e
                found.append({**record, "replaced": replaced})
            else:
                kept[event.key] = self._item(event)
        if kept:
            raise CorruptRecordError(
                run_id=self.compacted_run_id,
                record_id=next(iter(kept)),
                reason="a kept item no compaction record names",
            )
        return found

    def _overridden(self) -> bool:
        """Whether a subclass changes how items are read or written (then no atomic hooks)."""
        cls = type(self)
        return any(
            getattr(cls, name) is not getattr(MemorySession, name)
            for name in ("get_items", "add_items", "pop_item", "clear_session")
        )

    async def _replace(
        self, replaced: Sequence[str], items: list[Any], *, whole: bool, expired: Sequence[str] = ()
    ) -> bool:
        """Put ``items`` in place of the stored items ``replaced`` (the latest ones), atomically.

        False, with nothing changed, when the session's latest items are no
        longer ``replaced`` (or, with ``whole``, not all of its items), or its
        first items no longer ``expired`` (deleted with the replacement, not kept).
        """
        now = datetime.now(UTC)
        events = [
            FrameworkItem(
                key=uuid.uuid4().hex, timestamp=now, framework=FRAMEWORK, item=_checked(i, item)
            )
            for i, item in enumerate(items)
        ]
        record = FrameworkItem(
            key=uuid.uuid4().hex,
            timestamp=now,
            framework=COMPACTION,
            item={
                "replaced": list(replaced),
                "output": [event.item for event in events],
                "whole": whole,
                **({"expired": len(expired)} if expired else {}),
            },
        )
        replace_tail = self.memory.replace_tail  # type: ignore[attr-defined]
        done: bool = await replace_tail(
            self.agent_id,
            self.session_id,
            replaced,
            events,
            whole=whole,
            archive=self.compacted_run_id,
            provenance=(record,),
            expired=expired,
        )
        return done

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[Any], bool] | None = None,
    ) -> _CompactionSnapshot | None:
        """The latest ``limit`` items, with a replacement of their suffix in one transaction.

        The OpenAI Agents SDK's hook for automatic compaction (its own SQLite
        and SQLAlchemy sessions have it): ``complete`` says whether the items
        are the whole history, and ``replace_suffix(start, output)`` puts
        ``output`` in place of ``items[start:]`` only if they are still the
        session's latest items, returning False (nothing changed) otherwise.
        None when the memory cannot replace items atomically or a subclass
        changes how items are stored. ``prune_prefix`` (the encrypted
        session's test for expired items) deletes, in the same transaction,
        the session's oldest items it holds true for, up to the first it does
        not (as the SDK's SQLite session does); they are not kept.
        """
        from agents.memory.session import _CompactionSnapshot

        self._check_open()
        if self._overridden() or not hasattr(self.memory, "replace_tail"):
            return None
        if type(limit) is not int or limit < 1:
            raise _Refused(field="limit", expected="an int >= 1", got=limit)
        snapshot = await self.memory.load_run(self.agent_id, self.session_id, last=limit + 1)
        events = snapshot.events[-limit:]
        complete = len(snapshot.events) <= limit
        items: list[Any] = [self._item(event) for event in events]
        keys = [event.key for event in events]

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            self._check_open()
            replaced = keys[start:]
            if not replaced:
                return False
            expired = await self._expired(prune_prefix, before=replaced[0])
            return await self._replace(replaced, output, whole=False, expired=expired)

        return _CompactionSnapshot(items, complete, replace_suffix)

    async def _expired(self, prune: Callable[[Any], bool] | None, *, before: str) -> list[str]:
        """The keys of the session's oldest items ``prune`` holds true for, before ``before``."""
        if prune is None:
            return []
        snapshot = await self.memory.load_run(self.agent_id, self.session_id)
        expired: list[str] = []
        for event in snapshot.events:
            if event.key == before or not prune(self._item(event)):
                break
            expired.append(event.key)
        return expired

    async def _atomic_replace_items(self, items: list[Any]) -> bool:
        """Replace the whole history by ``items`` in one transaction (the SDK's hook).

        The replaced items are kept with a compaction record (see `compactions`).
        False when the memory cannot replace items atomically or a subclass
        changes how items are stored; the SDK then falls back to its own path.

        Raises:
            TransientError: other writers kept changing the session.
        """
        self._check_open()
        if self._overridden() or not hasattr(self.memory, "replace_tail"):
            return False
        checked = [_checked(i, item) for i, item in enumerate(items)]
        for _ in range(_REPLACE_ATTEMPTS):
            snapshot = await self.memory.load_run(self.agent_id, self.session_id)
            keys = [event.key for event in snapshot.events]
            if await self._replace(keys, checked, whole=True):
                return True
        raise TransientError(
            f"session {self.session_id!r} changed {_REPLACE_ATTEMPTS} times while its"
            " history was being replaced",
            operation="replace_items",
        )

    async def messages(self) -> list[Message]:
        """The session's items read back as a transcript (see `items_to_messages`)."""
        return items_to_messages(await self.get_items(-1))


_ASSISTANT_OUTPUT = frozenset(("reasoning", "function_call"))
_IMAGE_TYPES = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}


def _unsupported(index: int, field: str, expected: str, got: object) -> TranscriptError:
    return TranscriptError(
        field=f"items[{index}].{field}",
        expected=expected,
        got=got,
        message=f"items[{index}]: the transcript view has no part for {field}={got!r}",
    )


def _image(index: int, content: Mapping[str, Any]) -> ImagePart:
    url = content.get("image_url")
    if not isinstance(url, str) or not url.startswith("data:"):
        raise _unsupported(index, "content.image_url", "an inline data: URL", url)
    header, _, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    image_format = _IMAGE_TYPES.get(media_type)
    if image_format is None or encoding != "base64":
        raise _unsupported(index, "content.image_url", "base64 png, jpeg, gif or webp", header)
    return ImagePart(format=image_format, data=b64decode(data))  # type: ignore[arg-type]


def _user_parts(index: int, content: object) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    if not isinstance(content, list):
        raise _unsupported(index, "content", "text or a list of input content", content)
    parts: list[Part] = []
    for piece in content:
        kind = piece.get("type") if isinstance(piece, Mapping) else None
        if kind in ("input_text", "output_text"):
            parts.append(TextPart(text=piece["text"]))
        elif kind == "input_image":
            parts.append(_image(index, piece))
        else:
            raise _unsupported(index, "content.type", "input_text or input_image", kind)
    return parts


def _assistant_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant message item in the Responses output shape (easy messages hold a str)."""
    if item.get("type") == "message":
        return dict(item)
    content = item.get("content")
    if isinstance(content, str):
        content = [{"type": "output_text", "text": content}]
    return {"type": "message", "role": "assistant", "content": content}


def items_to_messages(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Read OpenAI Agents SDK session items as agentledger `Message`\\ s, in order.

    Consecutive model output (reasoning, assistant messages, function calls)
    becomes one assistant message, decoded as agentledger decodes a Responses
    API answer; function-call outputs become the tool results of the user
    message that follows, with any user input right after them; system and
    developer messages become system messages. The result is the transcript the
    conversation was, ready for `~agentledger.transcript.validate_planner_transcript`.

    Raises:
        TranscriptError: an item the transcript has no part for (e.g. a hosted
            tool call), named by its index.
    """
    messages: list[Message] = []
    output: list[dict[str, Any]] = []
    results: list[Part] = []

    def flush_output() -> None:
        if output:
            response = openai_responses.decode({"status": "completed", "output": list(output)})
            messages.append(response.message)
            output.clear()

    def flush_results(extra: Sequence[Part] = ()) -> None:
        if results or extra:
            messages.append(Message(role="user", parts=(*results, *extra)))
            results.clear()

    for index, item in enumerate(items):
        kind = item.get("type", "message")
        role = item.get("role")
        if kind in _ASSISTANT_OUTPUT or (kind == "message" and role == "assistant"):
            flush_results()
            output.append(dict(item) if kind != "message" else _assistant_item(item))
        elif kind == "function_call_output":
            flush_output()
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id or "output" not in item:
                raise _unsupported(index, "call_id", "a function call output with an id", call_id)
            results.append(ToolResultPart(tool_use_id=call_id, content=item["output"]))
        elif kind == "message" and role == "user":
            flush_output()
            flush_results(_user_parts(index, item.get("content")))
        elif kind == "message" and role in ("system", "developer"):
            flush_output()
            flush_results()
            parts = tuple(_user_parts(index, item.get("content")))
            messages.append(Message(role="system", parts=parts))
        else:
            raise _unsupported(index, "type", "a message, reasoning or function call item", kind)
    flush_output()
    flush_results()
    return messages
